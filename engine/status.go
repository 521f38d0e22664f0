package engine

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/state"
)

// StatusRow is how far behind one stage, or one consumer group of a
// queue, is.
type StatusRow struct {
	Kind    string `json:"kind"` // "stage" or "group"
	Stage   string `json:"stage,omitempty"`
	Queue   string `json:"queue"`
	Group   string `json:"group,omitempty"`
	Backlog int64  `json:"backlog"`
	Workers int    `json:"workers,omitempty"`
	// OldestAge is how long the oldest block still owed has waited since
	// it arrived (0 when none is).
	OldestAge time.Duration `json:"oldest_age_ns"`
	// ArrivalTo is from a block's arrival to its output (stages) or its
	// delivery (groups); EventTo from its event time; over the last hour.
	ArrivalTo Percentiles `json:"arrival_to"`
	EventTo   Percentiles `json:"event_to"`
}

type latencyMetrics struct {
	arrivalToOutput, eventToOutput *prometheus.HistogramVec
	arrivalToDelivery              *prometheus.HistogramVec
}

func newLatencyMetrics(reg prometheus.Registerer) *latencyMetrics {
	buckets := prometheus.ExponentialBuckets(0.001, 4, 14) // 1 ms to about 74 hours
	m := &latencyMetrics{
		arrivalToOutput: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_stage_arrival_to_output_seconds",
			Help: "From an input block's arrival to the stage publishing its output.", Buckets: buckets}, []string{"stage"}),
		eventToOutput: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_stage_event_to_output_seconds",
			Help: "From an input block's event time to the stage publishing its output.", Buckets: buckets}, []string{"stage"}),
		arrivalToDelivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_group_arrival_to_delivery_seconds",
			Help: "From a block's arrival to a consumer group acknowledging it.", Buckets: buckets}, []string{"queue", "group"}),
	}
	if reg != nil {
		reg.MustRegister(m.arrivalToOutput, m.eventToOutput, m.arrivalToDelivery)
	}
	return m
}

// outputLatency records a run's inputs reaching their outputs.
func (e *Engine) outputLatency(stage string, inputs []state.Block) {
	now := e.cfg.Now()
	for _, b := range inputs {
		a, ev := now.Sub(b.Arrived), now.Sub(b.Time)
		e.lat.add("stage\x00"+stage+"\x00arrival", a)
		e.lat.add("stage\x00"+stage+"\x00event", ev)
		e.latm.arrivalToOutput.WithLabelValues(stage).Observe(a.Seconds())
		e.latm.eventToOutput.WithLabelValues(stage).Observe(ev.Seconds())
	}
}

// Delivered records a consumer group acknowledging blocks.
func (e *Engine) Delivered(queue, group string, ids []block.ID) {
	now := e.cfg.Now()
	for _, id := range ids {
		b, err := e.db.Lookup(id)
		if err != nil {
			continue
		}
		a, ev := now.Sub(b.Arrived), now.Sub(b.Time)
		e.lat.add("group\x00"+queue+"\x00"+group+"\x00arrival", a)
		e.lat.add("group\x00"+queue+"\x00"+group+"\x00event", ev)
		e.latm.arrivalToDelivery.WithLabelValues(queue, group).Observe(a.Seconds())
	}
}

// Status reports, per stage and per consumer group, the backlog, the age
// of the oldest block owed and the latency percentiles of the last hour.
func (e *Engine) Status(ctx context.Context) ([]StatusRow, error) {
	now := e.cfg.Now()
	var rows []StatusRow
	for _, s := range e.Stats() {
		r := StatusRow{Kind: "stage", Stage: s.Stage, Queue: s.Inputs[0], Backlog: s.Backlog, Workers: s.Workers,
			ArrivalTo: e.lat.percentiles("stage\x00" + s.Stage + "\x00arrival"),
			EventTo:   e.lat.percentiles("stage\x00" + s.Stage + "\x00event")}
		if at, ok, err := e.db.OldestOwed(s.Inputs[0], s.ID); err != nil {
			return nil, err
		} else if ok {
			r.OldestAge = now.Sub(at)
		}
		rows = append(rows, r)
	}
	qs, err := e.db.Queues()
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		gs, err := e.db.Groups(q.Name)
		if err != nil {
			return nil, err
		}
		for _, g := range gs {
			if isStageGroup(g.Group) {
				continue
			}
			r := StatusRow{Kind: "group", Queue: q.Name, Group: g.Group, Backlog: int64(g.Unreserved + g.Reserved),
				ArrivalTo: e.lat.percentiles("group\x00" + q.Name + "\x00" + g.Group + "\x00arrival"),
				EventTo:   e.lat.percentiles("group\x00" + q.Name + "\x00" + g.Group + "\x00event")}
			if at, ok, err := e.db.OldestOwed(q.Name, g.Group); err != nil {
				return nil, err
			} else if ok {
				r.OldestAge = now.Sub(at)
			}
			rows = append(rows, r)
		}
	}
	return rows, ctx.Err()
}
