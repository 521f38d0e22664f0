package server

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
	"github.com/plumb-dev/plumb/windowing"
)

// serveWindows streams complete windows to a consumer group.
func (s *Service) serveWindows(ctx context.Context, raw []byte, stream aflight.FlightService_DoGetServer) error {
	var t flight.WindowTicket
	if err := flight.DecodeStrict(raw, &t); err != nil {
		return status.Errorf(codes.InvalidArgument, "window ticket %q: %v; want {\"window\": QUEUE, \"spec\": {\"size\": \"24h\", ...}, \"group\": G, \"follow\": bool}", truncate(raw), err)
	}
	if err := block.ValidateQueue(t.Window); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := block.ValidateGroup(t.Group); err != nil {
		return status.Errorf(codes.InvalidArgument, "window ticket: %v (a window stream needs a consumer group)", err)
	}
	var ps *pipeline.WindowSpec
	if t.Spec != nil {
		var err error
		if ps, err = windowSpec(*t.Spec); err != nil {
			return status.Errorf(codes.InvalidArgument, "window ticket spec: %v", err)
		}
	}
	spec, err := engine.WindowSpec(ps)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "window ticket spec: %v", err)
	}
	tr, err := windowing.New(spec)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "window ticket spec: %v", err)
	}
	if t.From == "" {
		t.From = flight.FromEarliest
	}
	g, err := s.useGroup(ctx, t.Window, t.Group, state.From(t.From), "window read", true)
	if err != nil {
		return err
	}
	// The group's windows, as a stage's, are recorded once sent.
	recKey := "stream:" + t.Window + ":" + t.Group
	recs, err := s.db.Windows(recKey)
	if err != nil {
		return statusOf(err, codes.Internal)
	}
	after := g.Start
	feed := func() error {
		for {
			bs, err := s.db.Blocks(t.Window, after, 1000)
			if err != nil {
				return err
			}
			for _, b := range bs {
				after = b.Serial
				tr.Add(windowing.Block{Instance: b.Instance, Seq: b.Seq, Time: b.Time, Arrived: b.Arrived, Name: b.Name})
			}
			if len(bs) < 1000 {
				return nil
			}
		}
	}
	if err := feed(); err != nil {
		return statusOf(err, codes.Internal)
	}
	for _, r := range recs {
		if inst, idx, ok := splitID(r.ID); ok {
			tr.MarkFired(windowing.WindowID{Instance: inst, Index: idx}, r.Revision)
		}
	}
	w, err := flight.NewBlockWriter(stream, nil)
	if err != nil {
		return statusOf(err, codes.Unavailable)
	}
	for {
		changed := s.db.Changed(t.Window)
		if err := feed(); err != nil {
			return statusOf(err, codes.Internal)
		}
		now := s.cfg.Now()
		// A stretch of empty windows is one header, as a stage records it
		// as one: a reader costs what the data holds, not the time it spans.
		var stretch []windowing.Firing
		for _, f := range tr.Due(now) {
			if t.Spec.Empty != "run" && f.Empty() {
				if n := len(stretch); n > 0 && !f.Follows(stretch[n-1]) {
					if err := s.sendEmpty(w, t, recKey, stretch); err != nil {
						return statusOf(err, codes.Unavailable)
					}
					stretch = stretch[:0]
				}
				stretch = append(stretch, f)
				continue
			}
			if len(stretch) > 0 {
				if err := s.sendEmpty(w, t, recKey, stretch); err != nil {
					return statusOf(err, codes.Unavailable)
				}
				stretch = stretch[:0]
			}
			if err := s.sendWindow(ctx, w, t, recKey, f); err != nil {
				return statusOf(err, codes.Unavailable)
			}
		}
		if len(stretch) > 0 {
			if err := s.sendEmpty(w, t, recKey, stretch); err != nil {
				return statusOf(err, codes.Unavailable)
			}
		}
		if !t.Follow {
			return nil
		}
		wait := time.Minute
		if next := tr.NextCheck(now); !next.IsZero() {
			wait = min(max(next.Sub(now), 10*time.Millisecond), wait)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func splitID(s string) (string, int64, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			var idx int64
			if _, err := fmt.Sscan(s[i+1:], &idx); err != nil {
				return "", 0, false
			}
			inst := s[:i]
			if inst == "all" {
				inst = ""
			}
			return inst, idx, true
		}
	}
	return "", 0, false
}

// sendEmpty sends a stretch of consecutive empty windows of one site as
// one header, and records it sent as one.
func (s *Service) sendEmpty(w *flight.BlockWriter, t flight.WindowTicket, recKey string, fs []windowing.Firing) error {
	first, last := fs[0], fs[len(fs)-1]
	var h flight.WindowHeader
	h.Window.ID = first.ID.String()
	h.Instance = first.ID.Instance
	if first.ID.Instance == "" {
		h.Window.ID, h.Instance = fmt.Sprintf("all/%d", first.ID.Index), "all"
	}
	h.Window.From, h.Window.To, h.Window.FirstSeq, h.Window.LastSeq = first.From, last.To, first.FirstSeq, last.LastSeq
	h.Window.Revision, h.Window.Reason, h.Empty = 1, "empty", int64(len(fs))
	h.Present, h.Missing, h.Late = []uint64{}, []uint64{}, []uint64{}
	meta, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := w.Event(meta); err != nil {
		return err
	}
	rec := state.WindowRecord{Stage: recKey, ID: h.Window.ID, Revision: 1, Reason: "empty", From: first.From, To: last.To, Fired: last.At, Empty: h.Empty}
	_, err = s.db.CommitWindow(rec, t.Window, nil, nil, nil)
	return err
}

// sendWindow sends one window and records it sent.
func (s *Service) sendWindow(ctx context.Context, w *flight.BlockWriter, t flight.WindowTicket, recKey string, f windowing.Firing) error {
	var h flight.WindowHeader
	h.Window.ID = f.ID.String()
	if f.ID.Instance == "" {
		h.Window.ID = fmt.Sprintf("all/%d", f.ID.Index)
	}
	h.Window.From, h.Window.To, h.Window.FirstSeq, h.Window.LastSeq = f.From, f.To, f.FirstSeq, f.LastSeq
	h.Window.Revision, h.Window.Reason = f.Revision, string(f.Reason)
	h.Instance = f.ID.Instance
	if h.Instance == "" {
		h.Instance = "all"
	}
	h.Present, h.Missing, h.Late = []uint64{}, []uint64{}, []uint64{}
	rec := state.WindowRecord{Stage: recKey, ID: h.Window.ID, Revision: f.Revision, Reason: string(f.Reason), From: f.From, To: f.To, Fired: f.At}
	var blocks []state.Block
	for _, b := range f.Blocks {
		sb, err := s.db.Lookup(block.ID{Queue: t.Window, Instance: b.Instance, Seq: b.Seq})
		if err != nil {
			return fmt.Errorf("window %s: block %s: %w", h.Window.ID, b.Name, err)
		}
		blocks = append(blocks, sb)
		h.KernelDropped += sb.KernelDropped
		h.Present = append(h.Present, b.Seq)
		rec.Blocks = append(rec.Blocks, b.Name)
	}
	for _, m := range f.Missing {
		h.Missing = append(h.Missing, m.Seq)
		rec.Missing = append(rec.Missing, fmt.Sprintf("%s:%d", m.Instance, m.Seq))
	}
	for _, l := range f.Late {
		h.Late = append(h.Late, l.Seq)
		rec.Late = append(rec.Late, fmt.Sprintf("%s:%d", l.Instance, l.Seq))
	}
	h.Blocks = len(blocks)
	meta, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := w.Event(meta); err != nil {
		return err
	}
	for _, b := range blocks {
		if err := s.sendBlock(ctx, w, b); err != nil {
			return err
		}
	}
	// Sent whole: record it, so a reconnecting reader starts after it. A
	// stream that broke before this point gets the window again.
	_, err = s.db.CommitWindow(rec, t.Window, nil, nil, nil)
	return err
}

// windowSpec is a window ticket's spec as a job's window stage declares
// it: the same fields, its durations parsed as a job's are.
func windowSpec(w flight.WindowSpec) (*pipeline.WindowSpec, error) {
	ps := &pipeline.WindowSpec{Size: w.Size, Start: w.Start, End: w.End, MaxMissing: w.MaxMissing, Ordering: w.Ordering,
		LateHorizon: w.LateHorizon, Cutoff: w.Cutoff, Late: w.Late, PerInstance: w.PerInstance, Instances: w.Instances, Empty: w.Empty}
	for _, d := range []struct {
		text string
		into *pipeline.Duration
	}{{w.MaxWait, &ps.MaxWait}, {w.IdleTimeout, &ps.IdleTimeout}} {
		if d.text == "" {
			continue
		}
		v, err := pipeline.ParseDuration(d.text)
		if err != nil {
			return nil, err
		}
		*d.into = v
	}
	return ps, nil
}
