package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// handler runs an action: its body is at most the action's limit, and an
// admin action's caller is an admin on "*".
type handler func(s *Service, ctx context.Context, body []byte) (any, error)

// handlers holds the server's side of each of flight's actions;
// TestEveryActionHandled keeps the two sets equal.
var handlers = map[string]handler{
	flight.ActAck.Name:            (*Service).ack,
	flight.ActNack.Name:           (*Service).nack,
	flight.ActGroupList.Name:      (*Service).groupList,
	flight.ActGroupDelete.Name:    (*Service).groupDelete,
	flight.ActQueueStats.Name:     (*Service).queueStats,
	flight.ActLastSeq.Name:        (*Service).lastSeq,
	flight.ActListBlocks.Name:     (*Service).listBlocks,
	flight.ActSubmitJob.Name:      (*Service).submitJob,
	flight.ActProgramAdd.Name:     (*Service).addProgram,
	flight.ActProgramList.Name:    (*Service).listPrograms,
	flight.ActProgramRemove.Name:  (*Service).removeProgram,
	flight.ActRetractJob.Name:     (*Service).retractJob,
	flight.ActListJobs.Name:       (*Service).listJobs,
	flight.ActGraph.Name:          (*Service).graph,
	flight.ActStats.Name:          (*Service).stageStats,
	flight.ActFaulty.Name:         (*Service).faulty,
	flight.ActWindows.Name:        (*Service).windows,
	flight.ActFireWindow.Name:     (*Service).fireWindow,
	flight.ActPeekNext.Name:       (*Service).peekNext,
	flight.ActProcessNext.Name:    (*Service).processNext,
	flight.ActCommit.Name:         (*Service).commitStream,
	flight.ActSkip.Name:           (*Service).skipStream,
	flight.ActPutState.Name:       (*Service).putState,
	flight.ActGetState.Name:       (*Service).getState,
	flight.ActDeleteState.Name:    (*Service).deleteState,
	flight.ActListState.Name:      (*Service).listState,
	flight.ActCheckpoint.Name:     (*Service).checkpoint,
	flight.ActSetRetention.Name:   (*Service).setRetention,
	flight.ActRetention.Name:      (*Service).retentions,
	flight.ActFsck.Name:           (*Service).fsck,
	flight.ActRotateTokenKey.Name: (*Service).rotateTokenKey,
	flight.ActStoreList.Name:      (*Service).storeList,
	flight.ActStoreAdd.Name:       (*Service).storeAdd,
	flight.ActStoreRemove.Name:    (*Service).storeRemove,
	flight.ActStoreDrain.Name:     (*Service).storeDrain,
	flight.ActLease.Name:          (*Service).lease,
	flight.ActHeartbeat.Name:      (*Service).heartbeat,
	flight.ActCommitLease.Name:    (*Service).commitLease,
	flight.ActFailLease.Name:      (*Service).failLease,
	flight.ActWorkers.Name:        (*Service).workers,
	flight.ActLost.Name:           (*Service).lost,
	flight.ActReadAdmission.Name: func(s *Service, _ context.Context, _ []byte) (any, error) {
		return s.adm.Stats(), nil
	},
	flight.ActStatus.Name:     (*Service).status,
	flight.ActSiteOwners.Name: (*Service).siteOwners,
	flight.ActSiteAssign.Name: (*Service).siteAssign,
	flight.ActSiteEnd.Name:    (*Service).siteEnd,
	flight.ActRetry.Name:      (*Service).retry,
}

// ListActions implements Flight.
func (s *Service) ListActions(_ *aflight.Empty, stream aflight.FlightService_ListActionsServer) error {
	for _, a := range flight.Actions {
		if err := stream.Send(&aflight.ActionType{Type: a.Name, Description: a.Doc}); err != nil {
			return err
		}
	}
	return nil
}

// DoAction implements Flight. Results are JSON; list-blocks sends one
// result per block.
func (s *Service) DoAction(act *aflight.Action, stream aflight.FlightService_DoActionServer) error {
	a, ok := flight.ActionNamed(act.Type)
	run := handlers[act.Type]
	if !ok || run == nil {
		known := make([]string, 0, len(flight.Actions))
		for _, a := range flight.Actions {
			known = append(known, a.Name)
		}
		return status.Errorf(codes.InvalidArgument, "action %q is not known (known: %s)", act.Type, strings.Join(known, ", "))
	}
	ctx := stream.Context()
	if a.Admin {
		if err := s.allow(ctx, auth.Admin, "", act.Type); err != nil {
			return err
		}
	}
	if limit := a.Limit(); len(act.Body) > limit {
		return status.Errorf(codes.ResourceExhausted, "action %s: the body has %d bytes, more than the %d this action takes; send less at once (see ListActions)", act.Type, len(act.Body), limit)
	}
	res, err := run(s, ctx, act.Body)
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

// decode reads an action's body strictly into a T and checks it: a body
// that does not decode, or that check (when not nil) refuses, is
// INVALID_ARGUMENT naming the action and the body.
func decode[T any](a flight.Action, body []byte, check func(T) error) (T, error) {
	var req T
	if err := flight.DecodeStrict(body, &req); err != nil {
		return req, badBody(a.Name, body, err)
	}
	if check != nil {
		if err := check(req); err != nil {
			return req, badBody(a.Name, body, err)
		}
	}
	return req, nil
}

// decodeOptional is decode for the actions whose body may be left out: an
// empty body is T's zero value.
func decodeOptional[T any](a flight.Action, body []byte) (T, error) {
	if len(body) == 0 {
		var req T
		return req, nil
	}
	return decode[T](a, body, nil)
}

// readQueue is what an action that reads a queue checks once its body is
// good: the caller may read the queue and the server has it.
func (s *Service) readQueue(ctx context.Context, a flight.Action, queue string) error {
	if err := s.allow(ctx, auth.Read, queue, a.Name); err != nil {
		return err
	}
	return s.knownQueue(queue)
}

// ackRequest reads and checks the body of ack and nack (named by
// action) and whether the caller may use the group.
func (s *Service) ackRequest(ctx context.Context, a flight.Action, body []byte) (flight.AckRequest, []block.ID, error) {
	ids := make([]block.ID, 0, 16)
	req, err := decode(a, body, func(r flight.AckRequest) error {
		if err := errors.Join(block.ValidateQueue(r.Queue), block.ValidateGroup(r.Group)); err != nil {
			return err
		}
		if r.Reader != "" {
			if a != flight.ActNack {
				return fmt.Errorf("a reader is named in a nack, not in %s", a.Name)
			}
			if err := flight.ValidateReader(r.Reader); err != nil {
				return err
			}
		}
		for _, name := range r.Blocks {
			n, err := block.Parse(name)
			if err != nil {
				return err
			}
			if n.Queue != r.Queue {
				return fmt.Errorf("block %s is not of queue %q", name, r.Queue)
			}
			ids = append(ids, n.ID())
		}
		return nil
	})
	if err != nil {
		return req, nil, err
	}
	if err := s.allow(ctx, auth.Read, req.Queue, a.Name); err != nil {
		return req, nil, err
	}
	if _, err := s.useGroup(ctx, req.Queue, req.Group, "", a.Name, false); err != nil {
		return req, nil, err
	}
	return req, ids, nil
}

func (s *Service) ack(ctx context.Context, body []byte) (any, error) {
	req, ids, err := s.ackRequest(ctx, flight.ActAck, body)
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
	req, ids, err := s.ackRequest(ctx, flight.ActNack, body)
	if err != nil {
		return nil, err
	}
	n, err := s.db.Nack(req.Queue, req.Group, ids)
	if err != nil {
		return nil, err
	}
	if req.Reader != "" {
		// What the read sent besides the names: those it read ahead.
		if reserver, sent, ok := s.readers.take(req.Reader, req.Queue, req.Group); ok {
			more, err := s.db.GiveBack(req.Queue, req.Group, reserver, sent...)
			if err != nil {
				return nil, err
			}
			n += more
		}
	}
	return map[string]int{"released": n}, nil
}

func (s *Service) lastSeq(ctx context.Context, body []byte) (any, error) {
	req, err := decode(flight.ActLastSeq, body, func(r flight.PutCommand) error {
		return errors.Join(block.ValidateQueue(r.Queue), block.ValidateInstance(r.Instance))
	})
	if err != nil {
		return nil, err
	}
	if !s.may(ctx, auth.Write, req.Queue) { // an agent asks where to go on
		if err := s.allow(ctx, auth.Read, req.Queue, flight.ActLastSeq.Name); err != nil {
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
	req, err := decode(flight.ActQueueStats, body, func(r flight.QueueRequest) error { return block.ValidateQueue(r.Queue) })
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Read, req.Queue, flight.ActQueueStats.Name); err != nil {
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
	req, err := decode(flight.ActListBlocks, body, func(r flight.ListBlocksRequest) error { return block.ValidateQueue(r.Queue) })
	if err != nil {
		return nil, err
	}
	if err := s.readQueue(ctx, flight.ActListBlocks, req.Queue); err != nil {
		return nil, err
	}
	if req.Limit <= 0 || req.Limit > 100000 {
		req.Limit = 1000
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
	req, err := decodeOptional[flight.RotateTokenKeyRequest](flight.ActRotateTokenKey, body)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Admin, "", flight.ActRotateTokenKey.Name); err != nil {
		return nil, err
	}
	if s.authz == nil {
		return nil, status.Error(codes.FailedPrecondition, flight.ActRotateTokenKey.Name+": this server has no users (--users), so it signs no tokens")
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
