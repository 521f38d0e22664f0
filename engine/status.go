package engine

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/state"
)

// StatusRow is one stage and group of plumb status, as the protocol defines it.
type StatusRow = flight.StatusRow

type latencyMetrics struct {
	arrivalToOutput, eventToOutput *prometheus.HistogramVec
	arrivalToDelivery              *prometheus.HistogramVec
	streamArrivalToDelivery        *prometheus.HistogramVec
}

func newLatencyMetrics(reg prometheus.Registerer) *latencyMetrics {
	buckets := prometheus.ExponentialBuckets(0.001, 4, 14) // 1 ms to about 74 hours
	// Event time can be years old (backfill): up to about 35 years.
	eventBuckets := prometheus.ExponentialBuckets(0.001, 4, 21)
	m := &latencyMetrics{
		arrivalToOutput: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_stage_arrival_to_output_seconds",
			Help: "From an input block's arrival to the stage publishing its output.", Buckets: buckets}, []string{"stage"}),
		eventToOutput: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_stage_event_to_output_seconds",
			Help: "From an input block's event time to the stage publishing its output.", Buckets: eventBuckets}, []string{"stage"}),
		arrivalToDelivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_group_arrival_to_delivery_seconds",
			Help: "From a block's arrival to a consumer group acknowledging it.", Buckets: buckets}, []string{"queue", "group"}),
		streamArrivalToDelivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "plumb_stream_arrival_to_delivery_seconds",
			Help: "From a block's arrival to an ordered-stream consumer (or stream stage) moving past it.", Buckets: buckets}, []string{"queue", "consumer"}),
	}
	if reg != nil {
		reg.MustRegister(m.arrivalToOutput, m.eventToOutput, m.arrivalToDelivery, m.streamArrivalToDelivery)
	}
	return m
}

// The latency samples of a status row are kept under its key.
func stageKey(graphStage string) string   { return "stage\x00" + graphStage }
func groupKey(queue, group string) string { return "group\x00" + queue + "\x00" + group }
func streamKey(queue, name string) string { return "stream\x00" + queue + "\x00" + name }

// sample adds a block's time from arrival and from its event time to now
// to a row's samples, and returns the first.
func (e *Engine) sample(key string, b state.Block, now time.Time) time.Duration {
	a, ev := now.Sub(b.Arrived), now.Sub(b.Time)
	e.lat.add(key+"\x00arrival", a)
	e.lat.add(key+"\x00event", ev)
	return a
}

// percentiles are a row's latencies over the last hour.
func (e *Engine) percentiles(key string) (arrival, event Percentiles) {
	return e.lat.percentiles(key + "\x00arrival"), e.lat.percentiles(key + "\x00event")
}

// outputLatency records a run's inputs reaching their outputs.
func (e *Engine) outputLatency(graphStage string, inputs []state.Block) {
	now := e.cfg.Now()
	for _, b := range inputs {
		a := e.sample(stageKey(graphStage), b, now)
		e.latm.arrivalToOutput.WithLabelValues(graphStage).Observe(a.Seconds())
		e.latm.eventToOutput.WithLabelValues(graphStage).Observe(now.Sub(b.Time).Seconds())
	}
}

// Delivered records a consumer group acknowledging blocks.
func (e *Engine) Delivered(queue, group string, ids []block.ID) {
	now := e.cfg.Now()
	for _, id := range ids {
		if b, err := e.db.Lookup(id); err == nil {
			a := e.sample(groupKey(queue, group), b, now)
			e.latm.arrivalToDelivery.WithLabelValues(queue, group).Observe(a.Seconds())
		}
	}
}

// StreamDelivered records a stream consumer moving past a block it was
// sent.
func (e *Engine) StreamDelivered(b state.Block, consumer string) {
	a := e.sample(streamKey(b.Queue, consumer), b, e.cfg.Now())
	e.latm.streamArrivalToDelivery.WithLabelValues(b.Queue, consumer).Observe(a.Seconds())
}

// streamFed records a stream stage's program being fed a block. It counts
// on the stage's row: the program's output has no one input, so its
// latency is to the block being fed.
func (e *Engine) streamFed(graphStage string, b state.Block) {
	a := e.sample(stageKey(graphStage), b, e.cfg.Now())
	e.latm.streamArrivalToDelivery.WithLabelValues(b.Queue, graphStage).Observe(a.Seconds())
}

// Status reports, per stage and per consumer group, the backlog, the age
// of the oldest block owed and the latency percentiles of the last hour.
func (e *Engine) Status(ctx context.Context) ([]StatusRow, error) {
	now := e.cfg.Now()
	var rows []StatusRow
	for _, s := range e.Stats() {
		r := StatusRow{Kind: "stage", Stage: s.Stage, Queue: s.Inputs[0], Backlog: s.Backlog, Workers: s.Workers}
		r.ArrivalTo, r.EventTo = e.percentiles(stageKey(s.Stage))
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
			r := StatusRow{Kind: "group", Queue: q.Name, Group: g.Group, Backlog: int64(g.Unreserved + g.Reserved)}
			r.ArrivalTo, r.EventTo = e.percentiles(groupKey(q.Name, g.Group))
			if at, ok, err := e.db.OldestOwed(q.Name, g.Group); err != nil {
				return nil, err
			} else if ok {
				r.OldestAge = now.Sub(at)
			}
			rows = append(rows, r)
		}
		srows, err := e.streamRows(q.Name, now)
		if err != nil {
			return nil, err
		}
		rows = append(rows, srows...)
	}
	return rows, ctx.Err()
}

// streamRows are a queue's stream consumers outside stages (stream stages
// have their stage row), one per consumer over all its sites.
func (e *Engine) streamRows(queue string, now time.Time) ([]StatusRow, error) {
	cs, err := e.db.Cursors(queue)
	if err != nil {
		return nil, err
	}
	var rows []StatusRow
	at := map[string]int{}
	for _, c := range cs {
		if isStageGroup(c.Consumer) {
			continue
		}
		i, seen := at[c.Consumer]
		if !seen {
			i = len(rows)
			at[c.Consumer] = i
			r := StatusRow{Kind: "stream", Queue: queue, Group: c.Consumer}
			r.ArrivalTo, r.EventTo = e.percentiles(streamKey(queue, c.Consumer))
			rows = append(rows, r)
		}
		n, first, ok, err := e.db.StreamOwed(c)
		if err != nil {
			return nil, err
		}
		rows[i].Backlog += n
		if ok {
			rows[i].OldestAge = max(rows[i].OldestAge, now.Sub(first))
		}
	}
	return rows, nil
}
