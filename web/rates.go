package web

import (
	"net/http"
	"slices"
	"time"

	"github.com/plumb-dev/plumb/engine"
)

// stageCount is a stage's cumulative counts at one sample: rates are the
// differences between samples.
type stageCount struct {
	Name string
	Runs int64
	In   map[string]engine.EdgeCount
	Out  map[string]engine.EdgeCount
}

func countsOf(stats []engine.StageStats) []stageCount {
	out := make([]stageCount, 0, len(stats))
	for _, st := range stats {
		out = append(out, stageCount{Name: st.Stage, Runs: st.Runs, In: st.In, Out: st.Out})
	}
	return out
}

// Rate is what went through a stage or along an edge per second between
// two samples, stamped with the later one.
type Rate struct {
	At              time.Time `json:"at"`
	BlocksPerSec    float64   `json:"blocks_per_second"`
	BytesPerSec     float64   `json:"bytes_per_second"`
	OutBlocksPerSec float64   `json:"out_blocks_per_second,omitempty"`
	OutBytesPerSec  float64   `json:"out_bytes_per_second,omitempty"`
	RunsPerSec      float64   `json:"runs_per_second,omitempty"`
}

// RateSeries is the rates of a stage (Kind "stage": in, out and runs) or
// of an edge (Kind "edge", From a queue and To a stage, or From a stage
// and To a queue) over the chosen range.
type RateSeries struct {
	Kind   string `json:"kind"`
	Stage  string `json:"stage,omitempty"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	Points []Rate `json:"points"`
}

// ranges are the time ranges the charts offer; the page's choice comes as
// ?range=.
var ranges = map[string]time.Duration{"15m": 15 * time.Minute, "1h": time.Hour, "6h": 6 * time.Hour, "24h": 24 * time.Hour}

// since returns the start of the request's range (the last hour when it
// names none), or false for a range the page does not offer.
func since(r *http.Request, now time.Time) (time.Time, bool) {
	v := r.URL.Query().Get("range")
	if v == "" {
		v = "1h"
	}
	d, ok := ranges[v]
	return now.Add(-d), ok
}

// samples returns a copy of the history and the start of the range the
// request chose; false when it answered a range the page does not offer.
func (s *Server) samples(w http.ResponseWriter, r *http.Request) ([]point, time.Time, bool) {
	from, ok := since(r, time.Now())
	if !ok {
		http.Error(w, "range: want 15m, 1h, 6h or 24h", http.StatusBadRequest)
		return nil, from, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.history), from, true
}

func (s *Server) rates(w http.ResponseWriter, r *http.Request) {
	h, from, ok := s.samples(w, r)
	if !ok {
		return
	}
	visible := map[string]bool{} // stages over queues the user may read
	if g := s.graphOrNil(); g != nil {
		for _, n := range g.Stages {
			visible[n.Name] = s.readsAll(r, n.Inputs) // as the graph shows them
		}
	}
	series := map[string]*RateSeries{}
	var order []string
	add := func(key string, proto RateSeries, p Rate) {
		rs := series[key]
		if rs == nil {
			proto.Points = []Rate{}
			rs = &proto
			series[key] = rs
			order = append(order, key)
		}
		rs.Points = append(rs.Points, p)
	}
	for i := 1; i < len(h); i++ {
		prev, cur := h[i-1], h[i]
		if cur.At.Before(from) {
			continue
		}
		secs := cur.At.Sub(prev.At).Seconds()
		if secs <= 0 {
			continue
		}
		before := map[string]stageCount{}
		for _, c := range prev.Counts {
			before[c.Name] = c
		}
		for _, c := range cur.Counts {
			// A stage new since the last sample counted from zero, so a
			// job whose runs all fell between two samples still shows
			// them; a sample kept from before a restart has no counts
			// (nil) to compare with.
			b, ok := before[c.Name]
			if (!ok && prev.Counts == nil) || !visible[c.Name] || c.Runs < b.Runs {
				continue // before a restart, hidden, or counted anew
			}
			st := Rate{At: cur.At, RunsPerSec: float64(c.Runs-b.Runs) / secs}
			for q, e := range c.In {
				d := Rate{At: cur.At, BlocksPerSec: float64(e.Blocks-b.In[q].Blocks) / secs, BytesPerSec: float64(e.Bytes-b.In[q].Bytes) / secs}
				add("in\x00"+q+"\x00"+c.Name, RateSeries{Kind: "edge", From: q, To: c.Name}, d)
				st.BlocksPerSec += d.BlocksPerSec
				st.BytesPerSec += d.BytesPerSec
			}
			for q, e := range c.Out {
				d := Rate{At: cur.At, BlocksPerSec: float64(e.Blocks-b.Out[q].Blocks) / secs, BytesPerSec: float64(e.Bytes-b.Out[q].Bytes) / secs}
				add("out\x00"+c.Name+"\x00"+q, RateSeries{Kind: "edge", From: c.Name, To: q}, d)
				st.OutBlocksPerSec += d.BlocksPerSec
				st.OutBytesPerSec += d.BytesPerSec
			}
			add("stage\x00"+c.Name, RateSeries{Kind: "stage", Stage: c.Name}, st)
		}
	}
	out := make([]RateSeries, 0, len(order))
	for _, k := range order {
		out = append(out, *series[k])
	}
	reply(w, out, nil)
}
