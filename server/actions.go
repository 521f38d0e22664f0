package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/state"
)

type action struct {
	desc string
	run  func(s *Service, ctx context.Context, body []byte) (any, error)
	// maxBody caps the raw body, checked before it is decoded;
	// defaultMaxBody when 0. Decoding a 60 MiB body of JSON took
	// gigabytes, for a caller with no right at all.
	maxBody int
	// admin: only an admin on "*" may call it, checked before the body is
	// even looked at.
	admin bool
}

// Body caps: most bodies name a queue, a group or a block; an ack may name
// many blocks, a job file is up to 256 KiB of YAML that JSON may escape to
// six times its size, a stream's state is up to 64 KiB.
const (
	defaultMaxBody = 64 << 10
	ackMaxBody     = 1 << 20
	jobMaxBody     = 1536 << 10
	stateMaxBody   = 512 << 10
)

var actions = map[string]action{
	"ack": {
		desc:    `Acknowledge blocks for a consumer group so they are not handed out again. Body {"queue","group","blocks":[NAME,...]}; answers {"acked": N}.`,
		run:     (*Service).ack,
		maxBody: ackMaxBody,
	},
	"nack": {
		desc:    `Give blocks a consumer group's reader holds but could not finish back to the group at once, for any of its readers to take next, instead of after the visibility timeout; the attempt stays counted. Body {"queue","group","blocks":[NAME,...]}; answers {"released": N}, the blocks that were held.`,
		run:     (*Service).nack,
		maxBody: ackMaxBody,
	},
	"group-list": {
		desc: `A queue's consumer groups: owner, created, last used, and the deliveries unreserved, reserved, done and faulty; a non-admin sees their own. Body {"queue"}; one result each.`,
		run:  (*Service).groupList,
	},
	"group-delete": {
		desc: `Delete a consumer group (its creator or an admin; not a stage's), releasing the blocks it was owed. Body {"queue","group"}.`,
		run:  (*Service).groupDelete,
	},
	"queue-stats": {
		desc: `Counts for one queue: blocks, bytes, and per consumer group the deliveries unreserved, reserved, done and faulty. Body {"queue"}.`,
		run:  (*Service).queueStats,
	},
	"last-seq": {
		desc: `The highest sequence number stored for an instance, so an agent that lost its state never reuses one. Body {"queue","instance"}; answers {"seq": N, "found": bool, "ended": bool}, ended when the server ended the site's capture with that block (site-end).`,
		run:  (*Service).lastSeq,
	},
	"list-blocks": {
		desc: `The blocks of a queue in arrival order, one JSON result each. Body {"queue","after":SERIAL,"limit":N}.`,
		run:  (*Service).listBlocks,
	},

	"submit-job": {
		desc:    `Submit a job (YAML). Body {"file","yaml"}; answers {"job","state":"accepted"|"rejected","reason","warnings","stages"}.`,
		run:     (*Service).submitJob,
		maxBody: jobMaxBody,
	},
	"program-add": {
		desc:  `Register an executable on the server for jobs to name (admin). Body {"name","path","sha256","network"}; answers the program.`,
		run:   (*Service).addProgram,
		admin: true,
	},
	"program-list": {
		desc: `The registered programs, one result each.`,
		run:  (*Service).listPrograms,
	},
	"program-remove": {
		desc:  `Unregister a program no accepted job runs (admin). Body {"name"}.`,
		run:   (*Service).removeProgram,
		admin: true,
	},
	"retract-job": {
		desc: `Retract an accepted job; its stages stop unless another job owns them. Body {"job"}.`,
		run:  (*Service).retractJob,
	},
	"list-jobs": {
		desc: `Every submitted job with its state, reason and warnings, one result each.`,
		run:  (*Service).listJobs,
	},
	"graph": {
		desc: `The merged graph. Body {"format":"yaml"|"dot"}; answers {"yaml"} or {"dot"}.`,
		run:  (*Service).graph,
	},
	"stats": {
		desc: `Per stage: backlog, workers, runs, bytes in and out, processing and CPU seconds, I/O intensity; one result each.`,
		run:  (*Service).stageStats,
	},
	"faulty": {
		desc: `Blocks set aside after their last attempt, with the error kept; one result each. Body {"queue"} or {} for all.`,
		run:  (*Service).faulty,
	},
	"windows": {
		desc: `Window stages' windows: waiting ones with present and missing blocks, max_wait deadline and what a strict order waits for; fired ones with revision, reason, missing and late blocks. Body {"stage"} or {}.`,
		run:  (*Service).windows,
	},
	"fire-window": {
		desc: `Fire a waiting window now with what it holds. Body {"stage","window":"SITE/INDEX"}.`,
		run:  (*Service).fireWindow,
	},
	"peek-next": {
		desc: `Where a stream consumer stands: the next sequence number, whether it is present, the gap (1 present, k+1 with k missing, 0 caught up, negative for a late block behind the cursor), late blocks, and nanoseconds since it last advanced. Body {"queue","instance","consumer","from"}.`,
		run:  (*Service).peekNext,
	},
	"process-next": {
		desc: `The block at a stream consumer's cursor and its ticket; commit it to advance. Body {"queue","instance","consumer"}.`,
		run:  (*Service).processNext,
	},
	"commit": {
		desc: `Advance a stream consumer past the block it processed. Body {"queue","instance","consumer","seq"}.`,
		run:  (*Service).commitStream,
	},
	"skip": {
		desc: `Move a stream consumer past a missing block on purpose; the skip is recorded. Body {"queue","instance","consumer"}.`,
		run:  (*Service).skipStream,
	},
	"put-state": {
		desc:    `Set keys of a stream consumer's small state (an empty value deletes). Body {"queue","instance","consumer","state":{...}}.`,
		run:     (*Service).putState,
		maxBody: stateMaxBody,
	},
	"get-state": {
		desc: `A stream consumer's cursor, state, skips and checkpoint. Body {"queue","instance","consumer"}.`,
		run:  (*Service).getState,
	},
	"delete-state": {
		desc: `Delete a stream consumer (its owner or an admin), releasing the blocks its cursor held. Body {"queue","instance","consumer"}.`,
		run:  (*Service).deleteState,
	},
	"list-state": {
		desc: `Every stream consumer of a queue with its cursor and state, one result each. Body {"queue"}.`,
		run:  (*Service).listState,
	},
	"checkpoint": {
		desc:    `Save a stream consumer's cursor and state together (with "state" given, that state; with "seq", at that next block instead of the cursor, never past it); a stream from "checkpoint" resumes there. Body {"queue","instance","consumer","state","seq"}.`,
		run:     (*Service).checkpoint,
		maxBody: stateMaxBody,
	},
	"set-retention": {
		desc: `Set how long a queue keeps its blocks (admin): {"queue","retention":"forever"|"30d"|"500GiB"|"30d,500GiB"|"","drop_unconsumed":bool}. Blocks past it go unless a subscriber still owes them (drop_unconsumed: they go anyway and the subscriber's delivery becomes LOST). Queues a stage produces keep what its job says.`,
		run:  (*Service).setRetention,
	},
	"retention": {
		desc: `Every queue's retention policy; one result each.`,
		run:  (*Service).retentions,
	},
	"fsck": {
		desc:  `Check metadata against blobs (admin on "*"): blocks whose blob is missing or (with verify) corrupt, blobs no block names. Body {"repair":bool,"verify":bool,"grace_seconds":N}; repair deletes orphan blobs older than the grace (1 h) and marks broken blocks lost.`,
		run:   (*Service).fsck,
		admin: true,
	},
	"rotate-token-key": {
		desc:  `Make a new key for signing login tokens (admin on "*"), on every server sharing the metadata within seconds. Body {"keep":bool}: keep, the old key still verifies the tokens it signed until they expire (a routine rotation); without it every token signed before is refused at once (a key that leaked). API keys are not tokens and stay good.`,
		run:   (*Service).rotateTokenKey,
		admin: true,
	},
	"store-list": {
		desc:  `The blob stores (admin on "*"): name, URL, primary, draining, free and total bytes when the store can tell; one result each.`,
		run:   (*Service).storeList,
		admin: true,
	},
	"store-add": {
		desc:  `Add a blob store (admin on "*"): {"name","url":"file:///DIR"|"s3://BUCKET?endpoint=HOST:PORT"}. New blocks go to the store with the most free space.`,
		run:   (*Service).storeAdd,
		admin: true,
	},
	"store-remove": {
		desc:  `Forget an empty store (admin on "*"): {"name"}; drain it first.`,
		run:   (*Service).storeRemove,
		admin: true,
	},
	"store-drain": {
		desc:  `Move every blob of a store to the others while reads go on (admin on "*"): {"name","deadline_seconds":30,"workers":4}. The store takes no new blocks from the start; answers {"moved","bytes","left":[KEY...],"seconds"} — left are the blobs not moved by the deadline.`,
		run:   (*Service).storeDrain,
		admin: true,
	},
	"lease": {
		desc:  `For workers (admin on "*"): take a stage run. Body {"worker","host","slots","stages":PATTERN,"missing":[PROGRAM...]}; answers a lease {"lease","stage","program","inputs","outputs","ttl_ns"}, or {} when there was no work for 5 s. Read inputs with block tickets, upload outputs with DoPut {"queue","instance","lease"}, then commit-lease; heartbeat within the TTL.`,
		run:   (*Service).lease,
		admin: true,
	},
	"heartbeat": {
		desc:  `For workers: keep a lease alive. Body {"lease"}; FAILED_PRECONDITION when it expired (stop: the run went elsewhere).`,
		run:   (*Service).heartbeat,
		admin: true,
	},
	"commit-lease": {
		desc:    `For workers: publish a lease's staged outputs and release its inputs at once. Body {"lease","outputs":[{"queue","size","sha256"}]}; refused when the lease expired, so only one run publishes.`,
		run:     (*Service).commitLease,
		maxBody: ackMaxBody,
		admin:   true,
	},
	"fail-lease": {
		desc:    `For workers: report a failed run (retried with backoff, FAULTY after the last attempt). Body {"lease","error"}.`,
		run:     (*Service).failLease,
		maxBody: ackMaxBody,
		admin:   true,
	},
	"workers": {
		desc:  `The remote workers seen lately: host, slots, the runs each holds, last heartbeat, runs done and lost; one result each.`,
		run:   (*Service).workers,
		admin: true,
	},
	"lost": {
		desc: `Blocks a queue's retention dropped before a group was done with them. Body {"queue","group"}; one result each.`,
		run:  (*Service).lost,
	},
	"read-admission": {
		desc: `How honest the read admission's estimates are: transfers, those that took longer than estimated, reads refused as hopeless, actual÷estimated time p50/p99, and the rate assumed now.`,
		run: func(s *Service, _ context.Context, _ []byte) (any, error) {
			return s.adm.Stats(), nil
		},
	},
	"status": {
		desc: `How far behind each stage and consumer group is: backlog, workers, age of the oldest block owed, and arrival-to-output (or delivery) and event-to-output p50/p99 over the last hour; one result each.`,
		run:  (*Service).status,
	},
	"site-owners": {
		desc: `Who may put blocks into each site (an instance of a queue): its first writer, or the user an admin assigned; others' puts are refused. Body {"queue"} or {} for every queue you may read or write; one result each.`,
		run:  (*Service).siteOwners,
	},
	"site-assign": {
		desc: `Assign a site to a user, or with "user":"" leave it unowned for its next writer (admin of the queue). Body {"queue","instance","user"}.`,
		run:  (*Service).siteAssign,
	},
	"site-end": {
		desc: `End a site's capture (admin of the queue): the server appends an empty capture block marked final after the site's last, as its agent does when stopped for good, so stages let go of what they hold for it (a TCP message behind a hole). For a site whose agent died; an agent that comes back ships after it. Body {"queue","instance"}; answers the block, with "ended": false when the last block was already final.`,
		run:  (*Service).siteEnd,
	},
	"retry": {
		desc: `Requeue faulty blocks: {"queue","block"} for one, {"queue"} for a queue's, {} for all; answers {"requeued": N}.`,
		run:  (*Service).retry,
	},
}

// ListActions implements Flight.
func (s *Service) ListActions(_ *aflight.Empty, stream aflight.FlightService_ListActionsServer) error {
	names := make([]string, 0, len(actions))
	for n := range actions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := stream.Send(&aflight.ActionType{Type: n, Description: actions[n].desc}); err != nil {
			return err
		}
	}
	return nil
}

// DoAction implements Flight. Results are JSON; list-blocks sends one
// result per block.
func (s *Service) DoAction(act *aflight.Action, stream aflight.FlightService_DoActionServer) error {
	a, ok := actions[act.Type]
	if !ok {
		known := make([]string, 0, len(actions))
		for n := range actions {
			known = append(known, n)
		}
		sort.Strings(known)
		return status.Errorf(codes.InvalidArgument, "action %q is not known (known: %s)", act.Type, strings.Join(known, ", "))
	}
	ctx := stream.Context()
	if a.admin {
		if err := s.allow(ctx, auth.Admin, "", act.Type); err != nil {
			return err
		}
	}
	if limit := cmp.Or(a.maxBody, defaultMaxBody); len(act.Body) > limit {
		return status.Errorf(codes.ResourceExhausted, "action %s: the body has %d bytes, more than the %d this action takes; send less at once (see ListActions)", act.Type, len(act.Body), limit)
	}
	res, err := a.run(s, ctx, act.Body)
	if err != nil {
		return statusOf(err, codes.Internal)
	}
	items, isList := res.([]any)
	if !isList {
		items = []any{res}
	}
	for _, it := range items {
		raw, err := json.Marshal(it)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if err := stream.Send(&aflight.Result{Body: raw}); err != nil {
			return err
		}
	}
	return nil
}

// knownQueue answers NOT_FOUND for a queue the server does not have ("" is
// every queue): a listing or a retry of a misspelt queue said nothing. A
// queue a stage reads or writes is known before its first block.
func (s *Service) knownQueue(queue string) error {
	if queue == "" {
		return nil
	}
	_, err := s.db.Queue(queue)
	if !errors.Is(err, state.ErrNotFound) {
		return nil
	}
	if s.eng != nil {
		if g := s.eng.Graph(); g != nil {
			for _, n := range g.Stages {
				if slices.Contains(n.Inputs, queue) || slices.Contains(n.Outputs, queue) {
					return nil
				}
			}
		}
	}
	return status.Errorf(codes.NotFound, "no queue %s; list queues with `plumb queues`", queue)
}

func badBody(action string, body []byte, err error) error {
	return status.Errorf(codes.InvalidArgument, "%s: body %q: %v (see ListActions)", action, truncate(body), err)
}

// ackRequest reads and checks the body of ack and nack (named by
// action) and whether the caller may use the group.
func (s *Service) ackRequest(ctx context.Context, action string, body []byte) (flight.AckRequest, []block.ID, error) {
	var req flight.AckRequest
	if err := flight.DecodeStrict(body, &req); err != nil {
		return req, nil, badBody(action, body, err)
	}
	if err := block.ValidateQueue(req.Queue); err != nil {
		return req, nil, badBody(action, body, err)
	}
	if err := block.ValidateGroup(req.Group); err != nil {
		return req, nil, badBody(action, body, err)
	}
	ids := make([]block.ID, 0, len(req.Blocks))
	for _, name := range req.Blocks {
		n, err := block.Parse(name)
		if err != nil {
			return req, nil, badBody(action, body, err)
		}
		if n.Queue != req.Queue {
			return req, nil, badBody(action, body, fmt.Errorf("block %s is not of queue %q", name, req.Queue))
		}
		ids = append(ids, n.ID())
	}
	if err := s.allow(ctx, auth.Read, req.Queue, action); err != nil {
		return req, nil, err
	}
	if _, err := s.useGroup(ctx, req.Queue, req.Group, "", action, false); err != nil {
		return req, nil, err
	}
	return req, ids, nil
}

func (s *Service) ack(ctx context.Context, body []byte) (any, error) {
	req, ids, err := s.ackRequest(ctx, "ack", body)
	if err != nil {
		return nil, err
	}
	n, err := s.db.Ack(req.Queue, req.Group, ids)
	if err != nil {
		return nil, err
	}
	if s.eng != nil {
		s.eng.Delivered(req.Queue, req.Group, ids)
		s.eng.Acked(ctx, ids)
	}
	return map[string]int{"acked": n}, nil
}

func (s *Service) nack(ctx context.Context, body []byte) (any, error) {
	req, ids, err := s.ackRequest(ctx, "nack", body)
	if err != nil {
		return nil, err
	}
	n, err := s.db.Nack(req.Queue, req.Group, ids)
	if err != nil {
		return nil, err
	}
	return map[string]int{"released": n}, nil
}

func (s *Service) lastSeq(ctx context.Context, body []byte) (any, error) {
	var req flight.PutCommand
	if err := flight.DecodeStrict(body, &req); err != nil {
		return nil, badBody("last-seq", body, err)
	}
	if err := block.ValidateQueue(req.Queue); err != nil {
		return nil, badBody("last-seq", body, err)
	}
	if err := block.ValidateInstance(req.Instance); err != nil {
		return nil, badBody("last-seq", body, err)
	}
	if !s.may(ctx, auth.Write, req.Queue) { // an agent asks where to go on
		if err := s.allow(ctx, auth.Read, req.Queue, "last-seq"); err != nil {
			return nil, err
		}
	}
	seq, found, err := s.db.LastSeq(req.Queue, req.Instance)
	if err != nil {
		return nil, err
	}
	res := flight.LastSeqResult{Seq: seq, Found: found, Server: s.db.ID()}
	if found {
		if b, err := s.db.Lookup(block.ID{Queue: req.Queue, Instance: req.Instance, Seq: seq}); err == nil {
			res.Ended = b.Ended
		}
	}
	return res, nil
}

func (s *Service) stats(queue string) (flight.QueueStats, error) {
	q, err := s.db.Queue(queue)
	if err != nil {
		return flight.QueueStats{}, err
	}
	groups, err := s.db.Groups(queue)
	if err != nil {
		return flight.QueueStats{}, err
	}
	if groups == nil {
		groups = []state.GroupStats{}
	}
	if s.eng != nil {
		for i := range groups {
			groups[i].Stage, _ = s.eng.StageOf(groups[i].Group)
		}
	}
	qs := flight.QueueStats{Queue: q.Name, Blocks: q.Blocks, Bytes: q.Bytes, Groups: groups}
	if s.eng != nil {
		qs.Warning = s.eng.QueueWarning(queue, len(groups) > 0)
	}
	return qs, nil
}

func (s *Service) queueStats(ctx context.Context, body []byte) (any, error) {
	var req struct {
		Queue string `json:"queue"`
	}
	if err := flight.DecodeStrict(body, &req); err != nil {
		return nil, badBody("queue-stats", body, err)
	}
	if err := block.ValidateQueue(req.Queue); err != nil {
		return nil, badBody("queue-stats", body, err)
	}
	if err := s.allow(ctx, auth.Read, req.Queue, "queue-stats"); err != nil {
		return nil, err
	}
	qs, err := s.stats(req.Queue)
	if err == nil && s.authz != nil && !s.may(ctx, auth.Admin, req.Queue) {
		// Other users' groups, and what they hold, are theirs to know.
		qs.Groups = slices.DeleteFunc(qs.Groups, func(g flight.GroupStats) bool {
			return g.Owner != "" && g.Owner != caller(ctx)
		})
	}
	return qs, err
}

func (s *Service) listBlocks(ctx context.Context, body []byte) (any, error) {
	var req flight.ListBlocksRequest
	if err := flight.DecodeStrict(body, &req); err != nil {
		return nil, badBody("list-blocks", body, err)
	}
	if err := block.ValidateQueue(req.Queue); err != nil {
		return nil, badBody("list-blocks", body, err)
	}
	if err := s.allow(ctx, auth.Read, req.Queue, "list-blocks"); err != nil {
		return nil, err
	}
	if req.Limit <= 0 || req.Limit > 100000 {
		req.Limit = 1000
	}
	if err := s.knownQueue(req.Queue); err != nil {
		return nil, err
	}
	blocks, err := s.db.Blocks(req.Queue, req.After, req.Limit)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(blocks))
	for i, b := range blocks {
		out[i] = b
	}
	return out, nil
}

// flightInfo describes one queue as a flight: path [queue], the block
// schema, the counts, and one endpoint whose ticket reads the queue.
func (s *Service) flightInfo(q state.Queue) (*aflight.FlightInfo, error) {
	st, err := s.stats(q.Name)
	if err != nil {
		return nil, err
	}
	meta, _ := json.Marshal(st)
	tkt, _ := json.Marshal(flight.Ticket{Queue: q.Name, From: flight.FromEarliest})
	return &aflight.FlightInfo{
		Schema:           aflight.SerializeSchema(flight.BlockSchema, memory.DefaultAllocator),
		FlightDescriptor: &aflight.FlightDescriptor{Type: aflight.DescriptorPATH, Path: []string{q.Name}},
		Endpoint:         []*aflight.FlightEndpoint{{Ticket: &aflight.Ticket{Ticket: tkt}}},
		TotalRecords:     -1,
		TotalBytes:       q.Bytes,
		AppMetadata:      meta,
	}, nil
}

// ListFlights implements Flight: one flight per queue the caller may
// read.
func (s *Service) ListFlights(_ *aflight.Criteria, stream aflight.FlightService_ListFlightsServer) error {
	qs, err := s.db.Queues()
	if err != nil {
		return statusOf(err, codes.Internal)
	}
	for _, q := range qs {
		if !s.may(stream.Context(), auth.Read, q.Name) {
			continue
		}
		fi, err := s.flightInfo(q)
		if err != nil {
			return statusOf(err, codes.Internal)
		}
		if err := stream.Send(fi); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) queueOf(ctx context.Context, desc *aflight.FlightDescriptor) (state.Queue, error) {
	if desc == nil || desc.Type != aflight.DescriptorPATH || len(desc.Path) != 1 {
		return state.Queue{}, status.Error(codes.InvalidArgument, `want a path descriptor [QUEUE], or a command descriptor {"records": QUEUE, ...}`)
	}
	if err := block.ValidateQueue(desc.Path[0]); err != nil {
		return state.Queue{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.allow(ctx, auth.Read, desc.Path[0], "flight info"); err != nil {
		return state.Queue{}, err
	}
	q, err := s.db.Queue(desc.Path[0])
	if err != nil {
		return q, statusOf(err, codes.Internal)
	}
	return q, nil
}

// GetFlightInfo implements Flight: for a path descriptor [queue], the
// queue's blocks; for a command descriptor holding a records ticket, the
// table it reads (its schema, and the ticket).
func (s *Service) GetFlightInfo(ctx context.Context, desc *aflight.FlightDescriptor) (*aflight.FlightInfo, error) {
	if desc != nil && desc.Type == aflight.DescriptorCMD {
		return s.recordsInfo(ctx, desc)
	}
	q, err := s.queueOf(ctx, desc)
	if err != nil {
		return nil, err
	}
	fi, err := s.flightInfo(q)
	return fi, statusOf(err, codes.Internal)
}

// GetSchema implements Flight: every queue has the block schema; a
// records command has the schema of its table.
func (s *Service) GetSchema(ctx context.Context, desc *aflight.FlightDescriptor) (*aflight.SchemaResult, error) {
	if desc != nil && desc.Type == aflight.DescriptorCMD {
		fi, err := s.recordsInfo(ctx, desc)
		if err != nil {
			return nil, err
		}
		return &aflight.SchemaResult{Schema: fi.Schema}, nil
	}
	if _, err := s.queueOf(ctx, desc); err != nil {
		return nil, err
	}
	return &aflight.SchemaResult{Schema: aflight.SerializeSchema(flight.BlockSchema, memory.DefaultAllocator)}, nil
}

func (s *Service) rotateTokenKey(ctx context.Context, body []byte) (any, error) {
	var req flight.RotateTokenKeyRequest
	if len(body) > 0 {
		if err := flight.DecodeStrict(body, &req); err != nil {
			return nil, badBody("rotate-token-key", body, err)
		}
	}
	if err := s.allow(ctx, auth.Admin, "", "rotate-token-key"); err != nil {
		return nil, err
	}
	if s.authz == nil {
		return nil, status.Error(codes.FailedPrecondition, "rotate-token-key: this server has no users (--users), so it signs no tokens")
	}
	if _, err := s.db.RotateTokenKey(req.Keep); err != nil {
		return nil, err
	}
	if err := refreshTokenKeys(s.db, s.authz); err != nil {
		return nil, err
	}
	s.log.Warn("the token signing key was rotated", "by", caller(ctx), "old_tokens", map[bool]string{true: "good until they expire", false: "refused"}[req.Keep])
	return map[string]bool{"rotated": true}, nil
}
