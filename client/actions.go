package client

import (
	"context"
	"encoding/json"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/plumb-dev/plumb/flight"
)

// Groups lists a queue's consumer groups (a non-admin sees their own).
func (c *Client) Groups(ctx context.Context, queue string) ([]GroupStats, error) {
	return List[GroupStats](ctx, c, flight.ActGroupList, flight.GroupRequest{Queue: queue})
}

// DeleteGroup deletes a consumer group of a queue.
func (c *Client) DeleteGroup(ctx context.Context, queue, group string) error {
	return c.action(ctx, flight.ActGroupDelete, flight.GroupRequest{Queue: queue, Group: group}, func([]byte) error { return nil })
}

// Status reports how far behind each stage and consumer group is.
func (c *Client) Status(ctx context.Context) ([]StatusRow, error) {
	return List[StatusRow](ctx, c, flight.ActStatus, struct{}{})
}

// ReadAdmission says how the server's read deadline estimates fare.
func (c *Client) ReadAdmission(ctx context.Context) (ReadAdmission, error) {
	var out ReadAdmission
	err := c.action(ctx, flight.ActReadAdmission, struct{}{}, func(raw []byte) error { return json.Unmarshal(raw, &out) })
	return out, err
}

// Windows lists window stages' windows, waiting and fired.
func (c *Client) Windows(ctx context.Context, stage string) ([]WindowView, error) {
	return c.WindowsMatching(ctx, WindowsRequest{Stage: stage})
}

// WindowsRequest narrows a listing of windows: stage, site, state, time,
// and how many at most.
type WindowsRequest = flight.WindowsRequest

// WindowsMatching lists the windows a request picks.
func (c *Client) WindowsMatching(ctx context.Context, req WindowsRequest) ([]WindowView, error) {
	return List[WindowView](ctx, c, flight.ActWindows, req)
}

// FireWindow fires a waiting window now.
func (c *Client) FireWindow(ctx context.Context, stage, window string) error {
	return c.action(ctx, flight.ActFireWindow, map[string]string{"stage": stage, "window": window}, func([]byte) error { return nil })
}

// SubmitJob submits a job file's YAML; a refused job comes back with
// State "rejected" and the reason, not as an error.
func (c *Client) SubmitJob(ctx context.Context, file string, yaml []byte) (SubmitResult, error) {
	var res SubmitResult
	err := c.action(ctx, flight.ActSubmitJob, flight.SubmitJobRequest{File: file, YAML: string(yaml)}, func(raw []byte) error {
		return json.Unmarshal(raw, &res)
	})
	return res, err
}

// RetractJob retracts an accepted job.
func (c *Client) RetractJob(ctx context.Context, name string) error {
	return c.action(ctx, flight.ActRetractJob, map[string]string{"job": name}, func([]byte) error { return nil })
}

// Jobs lists the submitted jobs.
func (c *Client) Jobs(ctx context.Context) ([]Job, error) {
	return List[Job](ctx, c, flight.ActListJobs, struct{}{})
}

// Graph returns the merged graph as YAML, or as Graphviz DOT.
func (c *Client) Graph(ctx context.Context, dot bool) (string, error) {
	req := flight.GraphRequest{Format: "yaml"}
	if dot {
		req.Format = "dot"
	}
	var res flight.GraphResult
	err := c.action(ctx, flight.ActGraph, req, func(raw []byte) error { return json.Unmarshal(raw, &res) })
	return res.YAML + res.DOT, err
}

// Stats returns every stage's measurements.
func (c *Client) Stats(ctx context.Context) ([]StageStats, error) {
	return List[StageStats](ctx, c, flight.ActStats, struct{}{})
}

// Faulty lists the faulty blocks of a queue, or of all when queue is "".
func (c *Client) Faulty(ctx context.Context, queue string) ([]FaultyBlock, error) {
	return List[FaultyBlock](ctx, c, flight.ActFaulty, map[string]string{"queue": queue})
}

// Retry requeues faulty blocks: one by name, a queue's, or all.
func (c *Client) Retry(ctx context.Context, queue, name string) (int, error) {
	var res struct {
		Requeued int `json:"requeued"`
	}
	err := c.action(ctx, flight.ActRetry, flight.RetryRequest{Queue: queue, Block: name}, func(raw []byte) error { return json.Unmarshal(raw, &res) })
	return res.Requeued, err
}

// SiteOwner is who may put blocks into a site (an instance of a queue).
type SiteOwner = flight.SiteOwner

// SiteOwners lists who owns each site of a queue, or of every queue the
// caller may read or write when queue is "". A site's first writer owns
// it; others' puts to it are refused.
func (c *Client) SiteOwners(ctx context.Context, queue string) ([]SiteOwner, error) {
	return List[SiteOwner](ctx, c, flight.ActSiteOwners, flight.SiteRequest{Queue: queue})
}

// AssignSite gives a site to a user, or with user "" leaves it unowned
// for its next writer to claim (an admin of the queue).
func (c *Client) AssignSite(ctx context.Context, queue, instance, user string) (SiteOwner, error) {
	var out SiteOwner
	err := c.action(ctx, flight.ActSiteAssign, flight.SiteRequest{Queue: queue, Instance: instance, User: user}, func(b []byte) error { return json.Unmarshal(b, &out) })
	return out, err
}

// SiteEnd says how a site's capture ends after EndCapture.
type SiteEnd = flight.SiteEnd

// EndCapture ends a site's capture (admin of the queue): the server
// appends an empty final block after the site's last, so stages let go of
// what they hold for it. For a site whose agent died without stopping.
func (c *Client) EndCapture(ctx context.Context, queue, instance string) (SiteEnd, error) {
	var out SiteEnd
	err := c.action(ctx, flight.ActSiteEnd, flight.SiteRequest{Queue: queue, Instance: instance}, func(b []byte) error { return json.Unmarshal(b, &out) })
	return out, err
}

// AddProgram registers an executable on the server (admin).
func (c *Client) AddProgram(ctx context.Context, req flight.AddProgramRequest) (Program, error) {
	var out Program
	err := c.action(ctx, flight.ActProgramAdd, req, func(b []byte) error { return json.Unmarshal(b, &out) })
	return out, err
}

// Programs lists the registered programs.
func (c *Client) Programs(ctx context.Context) ([]Program, error) {
	return List[Program](ctx, c, flight.ActProgramList, struct{}{})
}

// RemoveProgram unregisters a program (admin).
func (c *Client) RemoveProgram(ctx context.Context, name string) error {
	return c.action(ctx, flight.ActProgramRemove, map[string]string{"name": name}, func([]byte) error { return nil })
}

// Records reads the rows a records ticket selects. Release the reader
// when done; cancelling ctx ends the read.
func (c *Client) Records(ctx context.Context, t flight.RecordsTicket) (*aflight.Reader, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	rpc, err := c.fc.DoGet(ctx, &aflight.Ticket{Ticket: raw})
	if err != nil {
		return nil, err
	}
	return aflight.NewRecordReader(rpc)
}

// RecordsTable reads the rows a records ticket selects into one table,
// for a selection that fits in memory (set the ticket's Limit to make
// sure; Records streams the rest). Release the table when done.
func (c *Client) RecordsTable(ctx context.Context, t flight.RecordsTicket) (arrow.Table, error) {
	r, err := c.Records(ctx, t)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	var recs []arrow.RecordBatch
	defer func() {
		for _, rec := range recs {
			rec.Release()
		}
	}()
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return array.NewTableFromRecords(r.Schema(), recs), nil
}

// RecordsSchema returns the schema of the table a records ticket reads,
// without reading it (the queue's first block's, or what its stage
// writes); a ticket the server would refuse is refused here.
func (c *Client) RecordsSchema(ctx context.Context, t flight.RecordsTicket) (*arrow.Schema, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	res, err := c.fc.GetSchema(ctx, &aflight.FlightDescriptor{Type: aflight.DescriptorCMD, Cmd: raw})
	if err != nil {
		return nil, err
	}
	return aflight.DeserializeSchema(res.GetSchema(), memory.DefaultAllocator)
}

// Workers lists the remote workers the server has seen lately.
func (c *Client) Workers(ctx context.Context) ([]WorkerInfo, error) {
	return List[WorkerInfo](ctx, c, flight.ActWorkers, struct{}{})
}

// Retentions lists every queue's retention policy, by queue name.
func (c *Client) Retentions(ctx context.Context) ([]flight.QueuePolicy, error) {
	return List[flight.QueuePolicy](ctx, c, flight.ActRetention, struct{}{})
}

// SetRetention sets a source queue's retention ("" removes it).
func (c *Client) SetRetention(ctx context.Context, queue, retention string, dropUnconsumed bool) (Policy, error) {
	var p Policy
	err := c.action(ctx, flight.ActSetRetention, flight.RetentionRequest{Queue: queue, Retention: retention, DropUnconsumed: dropUnconsumed},
		func(raw []byte) error { return json.Unmarshal(raw, &p) })
	return p, err
}

// LostBlocks lists the blocks a queue's retention dropped before a group
// (or any, with "") was done with them.
func (c *Client) LostBlocks(ctx context.Context, queue, group string) ([]LostBlock, error) {
	return List[LostBlock](ctx, c, flight.ActLost, map[string]string{"queue": queue, "group": group})
}

// Do runs any action with a JSON body and decodes its answer into out
// (nil to ignore it); an action answering a list calls each per item
// when out is a func([]byte) error. flight.Actions lists the actions.
func (c *Client) Do(ctx context.Context, action flight.Action, req, out any) error {
	return c.action(ctx, action, req, func(raw []byte) error {
		switch o := out.(type) {
		case nil:
			return nil
		case func([]byte) error:
			return o(raw)
		default:
			return json.Unmarshal(raw, out)
		}
	})
}

// Stream reads a stream ticket: blocks in order, with events between.
func (c *Client) Stream(ctx context.Context, t flight.StreamTicket) (*Stream, error) {
	return c.doGet(ctx, t)
}

// StreamAction calls a stream action and decodes its answer into out.
func (c *Client) StreamAction(ctx context.Context, action flight.Action, req flight.StreamRequest, out any) error {
	return c.action(ctx, action, req, func(raw []byte) error {
		if out == nil {
			return nil
		}
		return json.Unmarshal(raw, out)
	})
}

// List runs an action that answers a list (one result per item) and
// decodes each item as a T: for actions this package has no method for,
// with the caller's own type.
func List[T any](ctx context.Context, c *Client, action flight.Action, body any) ([]T, error) {
	var out []T
	err := c.action(ctx, action, body, func(raw []byte) error {
		var x T
		if err := json.Unmarshal(raw, &x); err != nil {
			return err
		}
		out = append(out, x)
		return nil
	})
	return out, err
}
