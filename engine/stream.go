package engine

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/plumb-dev/plumb/stage/program"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
)

// A stream stage runs its program once per site and keeps it running. The
// program reads the site's blocks in sequence order on stdin as one
// continuous capture (one pcap header, then every packet). Two more pipes
// let it checkpoint:
//
//   - fd 3 ($PLUMB_BLOCKS_FD): a line "block SEQ PACKETS" after each
//     block's packets, so the program knows where blocks end;
//   - fd 4 ($PLUMB_CHECKPOINT_FD): the program writes "checkpoint SEQ
//     STATE" once it has processed every block up to SEQ, STATE being one
//     line of its own (JSON, say).
//
// When the program exits it is started again, with backoff, from its last
// checkpoint: the blocks after SEQ, and $PLUMB_STATE holding STATE. What
// it writes on stdout becomes output blocks, cut every StreamCutBytes or
// StreamCutEvery.

// Stream output cuts.
const (
	StreamCutBytes = 1 << 20
	StreamCutEvery = 10 * time.Second
)

type streamState struct {
	queue   string
	running map[string]bool // per instance
	// ctx ends the stage's runners when the stage leaves the graph or is
	// suspended; nil until runners start.
	ctx  context.Context
	stop context.CancelFunc
}

// stopStreams ends a stream stage's runners (each checkpointed where its
// program last said). Called with e.mu held.
func (st *graphStage) stopStreams() {
	if st.stream != nil && st.stream.stop != nil {
		st.stream.stop()
		st.stream.ctx, st.stream.stop = nil, nil
	}
}

// streamConsumer is the cursor name of a stage on a site's stream.
func streamConsumer(group string) string { return group }

// startStreams starts a runner for every site of a stream stage's input
// that has none. Called with e.mu held.
func (e *Engine) startStreams(ctx context.Context, runs *sync.WaitGroup, st *graphStage) error {
	insts, err := e.db.Instances(st.stream.queue)
	if err != nil {
		return err
	}
	if st.stream.ctx == nil {
		st.stream.ctx, st.stream.stop = context.WithCancel(ctx)
	}
	sctx := st.stream.ctx
	for _, inst := range insts {
		if st.stream.running[inst] {
			continue
		}
		st.stream.running[inst] = true
		spec := runSpec{node: st.node, steps: st.steps}
		runs.Go(func() {
			e.runStream(sctx, st, spec, inst)
			e.mu.Lock()
			st.stream.running[inst] = false
			e.mu.Unlock()
			e.poke() // a runner stopped by a suspension may start again
		})
	}
	return nil
}

// runStream keeps a site's program running until ctx ends or the stage
// leaves the graph.
func (e *Engine) runStream(ctx context.Context, st *graphStage, spec runSpec, inst string) {
	log := e.log.With("stage", spec.node.Name, "instance", inst)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		e.mu.Lock()
		gone := e.stages[st.node.ID()] != st
		e.mu.Unlock()
		if gone {
			return
		}
		start := time.Now()
		err := e.streamOnce(ctx, st, spec, inst)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			attempt = 0 // it ran a good while: start the backoff over
		}
		wait := e.backoff(attempt + 1)
		log.Warn("stream program ended; restarting from its last checkpoint", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// streamOnce runs the program once, from the last checkpoint, until it
// exits.
func (e *Engine) streamOnce(ctx context.Context, st *graphStage, spec runSpec, inst string) error {
	queue, consumer := st.stream.queue, streamConsumer(st.group)
	// A site's stream starts at its first block, seq 1, even when later
	// ones came first (a stage upstream finishes blocks in any order);
	// after that, at the last checkpoint.
	from := "1"
	if c, err := e.db.GetCursor(queue, inst, consumer); err == nil && c.Checkpoint != nil {
		from = "checkpoint"
	}
	cur, err := e.db.OpenCursor(queue, inst, consumer, from)
	if err != nil {
		return err
	}
	if len(spec.steps) != 1 || spec.steps[0].Argv == nil {
		return errors.New("a stream stage runs one executable")
	}
	keepBlocks, keepFor, err := spec.node.Stream.ReplayLimits()
	if err != nil {
		return err
	}
	stateJSON := ""
	if cur.Checkpoint != nil {
		stateJSON = cur.Checkpoint.State["state"]
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work, err := e.scratch.make(e.cfg.Scratch, "stream-")
	if err != nil {
		return fmt.Errorf("scratch space for a stream: %w (is %s writable?)", err, e.cfg.Scratch)
	}
	defer e.scratch.done(work)
	blocksR, blocksW, err := os.Pipe()
	if err != nil {
		return err
	}
	ckR, ckW, err := os.Pipe()
	if err != nil {
		blocksR.Close()
		blocksW.Close()
		return err
	}
	// A stream program runs for as long as the stream: no CPU-time limit.
	x := e.confine(spec.node)
	if x.Sandbox != nil {
		lim := e.cfg.Sandbox.Limits()
		lim.CPU = 0
		x.Limits = &lim
	}
	// Its working directory is its own, inside the stream's scratch.
	dir := filepath.Join(work, "work")
	if err := os.Mkdir(dir, 0o700); err != nil {
		blocksR.Close()
		blocksW.Close()
		ckR.Close()
		ckW.Close()
		return err
	}
	cmd, proc, release, err := x.Command(ctx, spec.steps[0], spec.steps[0].Argv, dir, nil, []*os.File{blocksR, ckW}) // fd 3 and 4
	if err != nil {
		blocksR.Close()
		blocksW.Close()
		ckR.Close()
		ckW.Close()
		return err
	}
	defer release()
	cmd.Env = append(cmd.Env, "PLUMB_BLOCKS_FD=3", "PLUMB_CHECKPOINT_FD=4", "PLUMB_STATE="+stateJSON,
		"PLUMB_INSTANCE="+inst, "PLUMB_QUEUE="+queue)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	tail := program.NewTail(program.StderrKeep)
	cmd.Stderr = tail
	if err := proc.Start(); err != nil {
		return fmt.Errorf("start %s: %w", spec.steps[0].Argv[0], err)
	}
	blocksR.Close()
	ckW.Close()
	var wg sync.WaitGroup
	wg.Go(func() { // checkpoints the program reports
		sc := bufio.NewScanner(ckR)
		sc.Buffer(nil, state.MaxStreamState)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 3)
			if len(f) < 2 || f[0] != "checkpoint" {
				continue
			}
			seq, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				continue
			}
			st := map[string]string{}
			if len(f) == 3 {
				st["state"] = f[2]
			}
			released, err := e.db.CheckpointAt(queue, inst, consumer, seq+1, st, keepBlocks, keepFor)
			if err != nil {
				e.log.Warn("stream checkpoint", "stage", spec.node.Name, "instance", inst, "err", err)
			}
			e.afterCommit(ctx, released) // blocks kept only for this stage may go
		}
		ckR.Close()
	})
	wg.Go(func() { // the program's output, cut into blocks
		if err := e.streamOutputs(ctx, spec, inst, stdout); err != nil && ctx.Err() == nil {
			e.log.Warn("stream output", "stage", spec.node.Name, "instance", inst, "err", err)
		}
	})
	feedErr := make(chan error, 1)
	wg.Go(func() {
		err := e.feedStream(ctx, spec.node.Name, spec.node.Stream, queue, inst, consumer, stdin, blocksW)
		stdin.Close()
		blocksW.Close()
		feedErr <- err
	})
	err = proc.Wait()
	cancel()
	wg.Wait()
	if ferr := <-feedErr; err == nil && ferr != nil && !errors.Is(ferr, context.Canceled) {
		err = ferr
	}
	if err != nil && tail.String() != "" {
		err = fmt.Errorf("%v; stderr: %s", program.ExitError(err), lastLine(tail.String()))
	}
	return err
}

// feedStream writes a site's blocks from the cursor on as one capture.
// At a missing block it waits; with the stage's stream.gap_wait and
// gap_then: skip, it skips the block (recorded) after that wait.
func (e *Engine) feedStream(ctx context.Context, graphStage string, gap *pipeline.StreamSpec, queue, inst, consumer string, stdin io.Writer, blocks io.Writer) error {
	out := bufio.NewWriterSize(stdin, 1<<20)
	stream := pcap.NewConcat(out)
	var (
		holeAt    uint64
		holeSince time.Time
	)
	for {
		changed := e.db.Changed(queue)
		p, err := e.db.PeekNext(queue, inst, consumer)
		if err != nil {
			return err
		}
		if !p.Present {
			if p.Gap > 1 && gap != nil && gap.GapThen == "skip" && gap.GapWait > 0 {
				if holeAt != p.Next || holeSince.IsZero() {
					holeAt, holeSince = p.Next, e.cfg.Now()
				} else if e.cfg.Now().Sub(holeSince) >= time.Duration(gap.GapWait) {
					if _, err := e.db.Skip(queue, inst, consumer); err != nil {
						return err
					}
					e.log.Warn("stream skipped a missing block", "queue", queue, "instance", inst, "seq", p.Next)
					continue
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-changed:
			case <-time.After(time.Second):
			}
			continue
		}
		b, err := e.db.ProcessNext(queue, inst, consumer)
		if err != nil {
			return err
		}
		rc, err := e.store.Open(ctx, b.Key)
		if err != nil {
			return fmt.Errorf("block %s: %w", b.Name, err)
		}
		packets, err := stream.Append(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("block %s: %w", b.Name, err)
		}
		if err := stream.Flush(); err != nil {
			return err
		}
		if err := out.Flush(); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(blocks, "block %d %d\n", b.Seq, packets); err != nil {
			return err
		}
		if _, err := e.db.Commit(queue, inst, consumer, b.Seq); err != nil {
			return err
		}
		e.streamFed(graphStage, b)
	}
}

// streamOutputs cuts a program's stdout into output blocks.
func (e *Engine) streamOutputs(ctx context.Context, spec runSpec, inst string, stdout io.Reader) error {
	if len(spec.node.Outputs) == 0 {
		_, err := io.Copy(io.Discard, stdout)
		return err
	}
	q := spec.node.Outputs[0]
	seq, _, err := e.db.LastSeq(q, inst)
	if err != nil {
		return err
	}
	lines := make(chan []byte, 64)
	// The reader is this function's: on a failed cut it is drained until
	// the program's output ends, so it never blocks on a send no one
	// takes and the program never blocks on a pipe no one reads.
	defer func() {
		for range lines {
		}
	}()
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	var buf []byte
	var first time.Time
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		seq++
		n := block.Name{Time: first.UTC().Truncate(time.Second), Seq: seq, Instance: inst, Queue: q}
		sum := blob.Sum(sha256.Sum256(buf))
		key := blob.BlockKey(n, sum)
		if err := e.store.Put(context.WithoutCancel(ctx), key, strings.NewReader(string(buf)), int64(len(buf)), sum); err != nil {
			return err
		}
		_, _, err := e.db.CommitBlock(state.Block{Name: n.String(), Queue: q, Instance: inst, Seq: seq, Time: n.Time,
			Size: int64(len(buf)), SHA256: sum.String(), Key: key})
		buf = buf[:0]
		return err
	}
	tick := time.NewTicker(StreamCutEvery)
	defer tick.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return flush()
			}
			if len(buf) == 0 {
				first = e.cfg.Now()
			}
			buf = append(buf, line...)
			if len(buf) >= StreamCutBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		case <-tick.C:
			if err := flush(); err != nil {
				return err
			}
		}
	}
}
