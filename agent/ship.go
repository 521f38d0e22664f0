package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/client"
)

// ShipCounters are the shipper's running totals.
type ShipCounters struct {
	Acked      atomic.Int64 // blocks the server acknowledged (stored or duplicate)
	Duplicates atomic.Int64
	AckedBytes atomic.Int64
	Failures   atomic.Int64 // failed upload attempts
}

// Shipper uploads the spool's finished blocks and deletes each only after
// the server acknowledged it as stored or duplicate.
type Shipper struct {
	Spool    *Spool
	Client   *client.Client
	InFlight int           // blocks uploading at once
	MaxWait  time.Duration // backoff cap during outages
	Log      *slog.Logger
	Counters *ShipCounters
	// FailFast makes a block the server refuses (not an outage) end Run
	// with an error, as an import should; an agent keeps it and retries.
	FailFast bool

	mu      sync.Mutex
	sending map[uint64]bool
	refused error
	bound   bool // the server said who it is, and the spool is its
	// contact is when the server last answered (a bind or an ack).
	contact time.Time
	// bindErr and bindSaid are the last error of bind, and when it was
	// logged; bindRefused is it when the server refused the agent.
	bindErr     string
	bindSaid    time.Time
	bindRefused error
	// finished: the finite sources are done (drain closed), so a refusal
	// ends the agent instead of holding it for ever.
	finished atomic.Bool
}

// refusal says whether the server refused the caller rather than failed
// to answer: a credential it does not accept, or a right it lacks.
func refusal(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}

// bind asks the server who it is, once, before the first upload; a spool
// of another server is refused.
func (sh *Shipper) bind(ctx context.Context) (bool, error) {
	if sh.bound {
		return true, nil
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	q, inst := sh.Spool.Identity()
	res, err := sh.Client.LastSeq(qctx, q, inst)
	if err != nil {
		if sh.FailFast && !client.Transient(err) {
			return false, fmt.Errorf("asking the server for the last block of %s/%s: %w", q, inst, err)
		}
		// The caller waits. Said at once and then each minute, so a
		// wrong address, a missing --tls-ca or a refused credential
		// does not look like a quiet wait.
		if msg := err.Error(); msg != sh.bindErr || time.Since(sh.bindSaid) > time.Minute {
			if refusal(err) {
				sh.Log.Error("the server refuses this agent; retrying, but nothing ships until it is let in", "queue", q, "site", inst, "err", err,
					"check", "its credentials (--token-file, or --user with PLUMB_SECRET), and that its user may write the queue and owns the site (plumb site owners)")
			} else {
				sh.Log.Warn("server not reachable yet; retrying (check --server, and --tls-ca or --tls if it serves TLS)", "err", err)
			}
			sh.bindErr, sh.bindSaid = msg, time.Now()
		}
		sh.mu.Lock()
		sh.bindRefused = nil
		if refusal(err) {
			sh.bindRefused = fmt.Errorf("the server refuses this agent for %s/%s: %w", q, inst, err)
		}
		sh.mu.Unlock()
		return false, nil
	}
	if err := sh.Spool.BindServer(res.Server); err != nil {
		return false, err
	}
	if res.Ended {
		moved, err := sh.Spool.AfterEnded(res.Seq)
		if err != nil {
			return false, err
		}
		if moved {
			sh.Log.Warn("the server ended this site's capture while the agent was away (plumb serve --end-capture-after, or plumb site end): blocks ship after its end, as a new capture", "ended_at", res.Seq)
		}
	}
	if sh.Spool.Provisional() {
		off, err := sh.Spool.Rebase(res.Seq, res.Found)
		if err != nil {
			return false, err
		}
		sh.Log.Info("server reached: blocks cut while it could not be asked ship after its last sequence number", "offset", off)
	}
	sh.mu.Lock()
	sh.bound, sh.contact = true, time.Now()
	sh.mu.Unlock()
	return true, nil
}

// rebindAfter is how long without an acknowledgement makes the shipper
// ask the server again where the site stands before it ships more.
const rebindAfter = time.Minute

// endedAt says whether the server ended the site's capture with a block
// numbered seq, and if so moves the spool's blocks after it.
func (sh *Shipper) endedAt(ctx context.Context, seq uint64) bool {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	q, inst := sh.Spool.Identity()
	res, err := sh.Client.LastSeq(qctx, q, inst)
	if err != nil || !res.Ended || res.Seq != seq {
		return false
	}
	moved, err := sh.Spool.AfterEnded(seq)
	if err != nil {
		sh.Log.Error("the server ended this site's capture, and the spool could not move its blocks after the end", "err", err)
		return false
	}
	if moved {
		sh.Log.Warn("the server ended this site's capture (plumb serve --end-capture-after, or plumb site end): blocks ship after its end, as a new capture", "ended_at", seq)
	}
	return moved
}

// Run ships until ctx ends, or, when drain is set, until drain is closed
// and the spool is empty.
func (sh *Shipper) Run(ctx context.Context, drain <-chan struct{}) error {
	if sh.InFlight <= 0 {
		sh.InFlight = 4
	}
	if sh.MaxWait <= 0 {
		sh.MaxWait = 30 * time.Second
	}
	sh.sending = map[uint64]bool{}
	slots := make(chan struct{}, sh.InFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		changed := sh.Spool.Changed()
		// After a quiet spell (an outage, or nothing to ship) the server
		// is asked again where the site stands before anything ships: it
		// may have ended the site's capture meanwhile.
		sh.mu.Lock()
		if sh.bound && time.Since(sh.contact) > rebindAfter {
			sh.bound = false
		}
		sh.mu.Unlock()
		if drain != nil && !sh.finished.Load() {
			select {
			case <-drain:
				sh.finished.Store(true)
			default:
			}
		}
		if ok, err := sh.bind(ctx); err != nil {
			return err
		} else if !ok {
			sh.mu.Lock()
			refused := sh.bindRefused
			sh.mu.Unlock()
			if refused != nil && sh.finished.Load() {
				// Finite sources, all cut: waiting for the server to let
				// the agent in would never end. The blocks stay spooled.
				return fmt.Errorf("%w; the blocks stay in the spool and ship when the agent runs again with what the server accepts", refused)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		ready, err := sh.Spool.Ready()
		if err != nil {
			return err
		}
		started := 0
		for _, b := range ready {
			sh.mu.Lock()
			busy := sh.sending[b.Name.Seq]
			sh.mu.Unlock()
			if busy {
				continue
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			sh.mu.Lock()
			sh.sending[b.Name.Seq] = true
			sh.mu.Unlock()
			started++
			wg.Go(func() {
				defer func() { <-slots }()
				sh.ship(ctx, b)
				sh.mu.Lock()
				delete(sh.sending, b.Name.Seq)
				sh.mu.Unlock()
			})
		}
		sh.mu.Lock()
		refused := sh.refused
		sh.mu.Unlock()
		if refused != nil {
			return refused
		}
		drained := false
		if drain != nil {
			select {
			case <-drain:
				drained = true
			default:
			}
		}
		if drained && len(ready) == 0 {
			// Sources are done; stop once nothing was added meanwhile.
			if r, _ := sh.Spool.Ready(); len(r) == 0 {
				return nil
			}
			continue
		}
		wake := drain
		if drained {
			wake = nil // closed: it would wake this loop at once, forever
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-wake:
		case <-time.After(time.Second):
		}
	}
}

// ship uploads one block until the server acknowledges it or ctx ends,
// backing off with jitter while the server cannot be reached.
func (sh *Shipper) ship(ctx context.Context, b ReadyBlock) {
	backoff := 200 * time.Millisecond
	src := client.Source{Name: b.Ship.String(), Size: b.Size, SHA256: b.SHA256, KernelDropped: b.KernelDropped, Final: b.Final,
		Open: func() (io.ReadCloser, error) { return os.Open(b.Path) }}
	for {
		res, err := sh.Client.Put(ctx, src)
		if err == nil && len(res) == 1 {
			if res[0].Status == "duplicate" {
				sh.Counters.Duplicates.Add(1)
			}
			if err := sh.Spool.Remove(b); err != nil {
				sh.Log.Error("block acknowledged but not removed from the spool; it will be re-sent and answered duplicate", "block", src.Name, "err", err)
			}
			sh.Counters.Acked.Add(1)
			sh.mu.Lock()
			sh.contact = time.Now()
			sh.mu.Unlock()
			sh.Counters.AckedBytes.Add(b.Size)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, fs.ErrNotExist) {
			return // another upload of it was acknowledged and removed it
		}
		sh.Counters.Failures.Add(1)
		if err == nil {
			err = fmt.Errorf("server answered %d results for one block", len(res))
		}
		if status.Code(err) == codes.FailedPrecondition && sh.endedAt(ctx, b.Ship.Seq) {
			return // the server ended the capture there: the block ships one number up
		}
		if !client.Transient(err) {
			// The server refused the block itself (a conflict, a bad name):
			// retrying will not help, but dropping it would lose data.
			// Keep it in the spool and say what an operator must do.
			if status.Code(err) == codes.InvalidArgument && b.SHA256 != "" {
				err = fmt.Errorf("%w; the spool copy no longer matches the checksum taken as it was cut (a disk fault, or the file was changed): cut it again from its source, e.g. import the source again with a fresh --spool (blocks the server already holds are answered duplicate)", err)
			}
			sh.Log.Error("server refused block; it stays in the spool until an operator moves it", "block", src.Name, "path", b.Path, "err", err)
			if sh.FailFast || sh.finished.Load() {
				sh.mu.Lock()
				sh.refused = fmt.Errorf("server refused block %s (kept in %s): %w", src.Name, b.Path, err)
				sh.mu.Unlock()
				return
			}
			backoff = sh.MaxWait
		} else {
			sh.Log.Warn("upload failed; will retry", "block", src.Name, "retry_in", backoff, "err", err)
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, sh.MaxWait)
	}
}
