package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// actionReceivers is how many action bodies one caller may have being
// received at once.
const actionReceivers = 4

// receivers bounds how many action bodies each caller has being received
// at once. gRPC reads a whole message (up to flight.MaxMessage) before a
// handler can look at its size, so 30 concurrent calls from one caller
// held 30 bodies; now a caller's further calls wait their turn (as long as
// their deadline allows), and other callers are not held up. A turn lasts
// only while the body arrives: a lease that waits for work holds none.
type receivers struct {
	mu  sync.Mutex
	per map[string]chan struct{} // by user; "" when authentication is off
}

func (r *receivers) slots(user string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.per == nil {
		r.per = map[string]chan struct{}{}
	}
	c := r.per[user]
	if c == nil {
		c = make(chan struct{}, actionReceivers) // users are few: the users file names them
		r.per[user] = c
	}
	return c
}

// stream is a stream interceptor; it runs after authentication, which
// names the caller.
func (r *receivers) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod != doActionMethod {
		return h(srv, ss)
	}
	return h(srv, &turnStream{ServerStream: ss, slots: r.slots(caller(ss.Context()))})
}

const doActionMethod = "/arrow.flight.protocol.FlightService/DoAction"

type turnStream struct {
	grpc.ServerStream
	slots chan struct{}
}

func (t *turnStream) RecvMsg(m any) error {
	ctx := t.Context()
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return status.FromContextError(context.Cause(ctx)).Err()
	}
	defer func() { <-t.slots }()
	// A body over flight.MaxMessage fails here, and gRPC has already told
	// the caller (ResourceExhausted, "received message larger than max").
	return t.ServerStream.RecvMsg(m)
}
