package flight

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
	"github.com/plumb-dev/plumb/pipeline"
	"github.com/plumb-dev/plumb/state"
	"github.com/plumb-dev/plumb/windowing"
)

// WindowTicket asks for a queue's complete windows, as an outside
// consumer group: each window comes as a zero-row batch whose
// app_metadata is a WindowHeader, then its blocks as in block reads. A
// window is handed to the group once; its blocks are acked like blocks.
type WindowTicket struct {
	Window string               `json:"window"` // the queue
	Spec   *pipeline.WindowSpec `json:"spec"`
	Group  string               `json:"group"`
	Follow bool                 `json:"follow,omitempty"`
	From   string               `json:"from,omitempty"` // "earliest" (default) or "latest", for a new group
}

// WindowHeader announces a window on a window stream.
type WindowHeader struct {
	Window struct {
		ID       string    `json:"id"`
		From     time.Time `json:"from,omitzero"`
		To       time.Time `json:"to,omitzero"`
		FirstSeq uint64    `json:"first_seq,omitempty"`
		LastSeq  uint64    `json:"last_seq,omitempty"`
		Revision int       `json:"revision"`
		Reason   string    `json:"reason"`
	} `json:"window"`
	Instance string   `json:"instance"`
	Present  []uint64 `json:"present"`
	Missing  []uint64 `json:"missing"`
	Late     []uint64 `json:"late"`
	Blocks   int      `json:"blocks"` // how many block reads follow
}

// serveWindows streams complete windows to a consumer group.
func (s *Service) serveWindows(ctx context.Context, raw []byte, stream aflight.FlightService_DoGetServer) error {
	var t WindowTicket
	if err := decodeStrict(raw, &t); err != nil {
		return status.Errorf(codes.InvalidArgument, "window ticket %q: %v; want {\"window\": QUEUE, \"spec\": {\"size\": \"24h\", ...}, \"group\": G, \"follow\": bool}", truncate(raw), err)
	}
	if err := block.ValidateQueue(t.Window); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := block.ValidateGroup(t.Group); err != nil {
		return status.Errorf(codes.InvalidArgument, "window ticket: %v (a window stream needs a consumer group)", err)
	}
	spec, err := engine.WindowSpec(t.Spec)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "window ticket spec: %v", err)
	}
	tr, err := windowing.New(spec)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "window ticket spec: %v", err)
	}
	if t.From == "" {
		t.From = string(state.Earliest)
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
	w, err := newBlockWriter(stream)
	if err != nil {
		return statusOf(err, codes.Unavailable)
	}
	for {
		changed := s.db.Changed(t.Window)
		if err := feed(); err != nil {
			return statusOf(err, codes.Internal)
		}
		now := s.cfg.Now()
		for _, f := range tr.Due(now) {
			if err := s.sendWindow(ctx, w, t, recKey, f); err != nil {
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

// sendWindow sends one window and records it sent.
func (s *Service) sendWindow(ctx context.Context, w *blockWriter, t WindowTicket, recKey string, f windowing.Firing) error {
	var h WindowHeader
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
	if err := w.write(0, nil, 0, meta); err != nil {
		return err
	}
	for _, b := range blocks {
		if err := s.sendBlock(ctx, w, b); err != nil {
			return err
		}
	}
	// Sent whole: record it, so a reconnecting reader starts after it. A
	// stream that broke before this point gets the window again.
	_, err = s.db.CommitWindow(rec, t.Window, nil, nil)
	return err
}
