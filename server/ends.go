package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/internal/every"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/state"
)

// A site's capture ends where its agent says (the last block of an
// import, or of an agent stopped for good, is marked final), and the
// stages let go then of what they hold past its end: a TCP message
// behind a hole, a datagram missing fragments. An agent that dies
// (SIGKILL, power, a machine taken away) says nothing, and what the
// stages hold for its site would wait for a next block for ever. The
// server ends such a capture itself: after the site has been silent for
// Config.EndCaptureAfter, or when an admin asks (plumb site end), it
// appends the block the agent would have shipped on a clean stop, an
// empty capture marked final, and marks it ended by the server. An agent
// that comes back later learns of it (last-seq says ended) and ships its
// blocks after it, as a new capture.

// endCapture appends an empty final block after a site's last block of a
// source queue. It is a no-op (ended false) when the last block is
// already final.
func (s *Service) endCapture(ctx context.Context, queue, instance string) (b state.Block, ended bool, err error) {
	seq, found, err := s.db.LastSeq(queue, instance)
	if err != nil {
		return b, false, err
	}
	if !found {
		return b, false, fmt.Errorf("%w: queue %s has no block of site %s", state.ErrNotFound, queue, instance)
	}
	last, err := s.db.Lookup(block.ID{Queue: queue, Instance: instance, Seq: seq})
	if err != nil {
		// Retention removed it; what it held went with it.
		return b, false, fmt.Errorf("%w: the last block of %s/%s (seq %d) is no longer stored", state.ErrNotFound, queue, instance, seq)
	}
	if last.Final {
		return last, false, nil
	}
	if seq >= block.MaxSourceSeq {
		return b, false, fmt.Errorf("site %s of %s is at the last sequence number", instance, queue)
	}
	data, err := s.emptyCaptureLike(ctx, last)
	if errors.Is(err, pcap.ErrNotCapture) {
		return b, false, fmt.Errorf("%w: block %s is not a capture (pcap or pcapng) an agent cut; only captures are ended", errNotCapture, last.Name)
	}
	if err != nil {
		return b, false, fmt.Errorf("block %s: %w", last.Name, err)
	}
	n := block.Name{Time: last.Time, Seq: seq + 1, Instance: instance, Queue: queue}
	sum := blob.Sum(sha256.Sum256(data.Bytes()))
	key := blob.BlockKey(n, sum)
	if err := s.store.Put(ctx, key, bytes.NewReader(data.Bytes()), int64(data.Len()), sum); err != nil {
		return b, false, err
	}
	b = state.Block{Name: n.String(), Queue: queue, Instance: instance, Seq: n.Seq, Time: n.Time, Size: int64(data.Len()),
		SHA256: sum.String(), Key: key, Final: true, Ended: true}
	if _, _, err := s.db.CommitBlock(b); err != nil {
		// The agent came back meanwhile and shipped this number.
		s.store.Delete(context.WithoutCancel(ctx), key)
		return b, false, err
	}
	s.log.Info("capture ended by the server: an empty final block follows the site's last, so stages let go of what they held", "block", n.String())
	return b, true, nil
}

// errNotCapture: the site's blocks are not pcap files, so they are no
// agent's capture, and no stage holds packets of them.
var errNotCapture = errors.New("not a capture")

// emptyCaptureLike is a block of the same capture as last with no
// packet, compressed as the queue's blocks are.
func (s *Service) emptyCaptureLike(ctx context.Context, last state.Block) (*bytes.Buffer, error) {
	rc, err := s.store.Open(ctx, last.Key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data := new(bytes.Buffer)
	w, err := codecs.FromExt(last.Queue).NewWriter(data)
	if err != nil {
		return nil, err
	}
	if err := pcap.WriteEmptyLike(w, rc); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return data, nil
}

// endSilentCaptures ends the capture of every site whose last block is
// not final and arrived more than after ago, in the queues stages read
// and none writes (what agents ship into; a queue no stage reads has
// nothing held for it). It checks every period until ctx ends.
func (s *Service) endSilentCaptures(ctx context.Context, after, period time.Duration) {
	every.Run(ctx, period, func() {
		qs, err := s.db.Queues()
		if err != nil {
			return
		}
		read, written := s.stageQueues()
		for _, q := range qs {
			if !read[q.Name] || written[q.Name] {
				continue
			}
			sites, err := s.db.Instances(q.Name)
			if err != nil {
				continue
			}
			for _, site := range sites {
				seq, ok, err := s.db.LastSeq(q.Name, site)
				if err != nil || !ok {
					continue
				}
				b, err := s.db.Lookup(block.ID{Queue: q.Name, Instance: site, Seq: seq})
				if err != nil || b.Final || time.Since(b.Arrived) < after {
					continue
				}
				if _, _, err := s.endCapture(ctx, q.Name, site); err != nil && ctx.Err() == nil && !errors.Is(err, errNotCapture) {
					s.log.Warn("a silent site's capture could not be ended; what stages hold for it waits for its next block", "queue", q.Name, "site", site, "err", err)
				}
			}
		}
	})
}

// stageQueues are the queues the current stages read and write.
func (s *Service) stageQueues() (read, written map[string]bool) {
	read, written = map[string]bool{}, map[string]bool{}
	if s.eng != nil {
		for _, st := range s.eng.Stats() {
			for _, q := range st.Inputs {
				read[q] = true
			}
			for _, q := range st.Outputs {
				written[q] = true
			}
		}
	}
	return read, written
}

// endCaptureStatus turns endCapture's errors into statuses.
func endCaptureStatus(err error) error {
	if errors.Is(err, errNotCapture) {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	if errors.Is(err, state.ErrNotFound) {
		return status.Error(codes.NotFound, err.Error())
	}
	if errors.Is(err, state.ErrConflict) {
		return status.Errorf(codes.Aborted, "%v: the site shipped a block meanwhile; its capture goes on", err)
	}
	return statusOf(err, codes.Internal)
}
