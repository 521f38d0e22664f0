package client

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors a call may match with errors.Is, by the server's answer (its
// gRPC status); the error's text stays the server's, naming the block,
// queue or group concerned.
var (
	ErrNotFound        = errors.New("not found")                       // NOT_FOUND
	ErrInvalid         = errors.New("invalid request")                 // INVALID_ARGUMENT, OUT_OF_RANGE
	ErrPermission      = errors.New("permission denied")               // PERMISSION_DENIED
	ErrUnauthenticated = errors.New("not logged in")                   // UNAUTHENTICATED
	ErrExhausted       = errors.New("a limit was reached")             // RESOURCE_EXHAUSTED
	ErrConflict        = errors.New("conflicts with the server state") // FAILED_PRECONDITION, ALREADY_EXISTS, ABORTED
	ErrUnavailable     = errors.New("server unavailable")              // UNAVAILABLE
	ErrTimeout         = errors.New("deadline exceeded")               // DEADLINE_EXCEEDED
)

var sentinels = map[codes.Code]error{
	codes.NotFound: ErrNotFound, codes.InvalidArgument: ErrInvalid, codes.OutOfRange: ErrInvalid,
	codes.PermissionDenied: ErrPermission, codes.Unauthenticated: ErrUnauthenticated,
	codes.ResourceExhausted: ErrExhausted, codes.FailedPrecondition: ErrConflict, codes.AlreadyExists: ErrConflict,
	codes.Aborted: ErrConflict, codes.Unavailable: ErrUnavailable, codes.DeadlineExceeded: ErrTimeout,
}

// serverError is a gRPC status error that also matches its sentinel; its
// text and status are the original's (status.Code still reads it).
type serverError struct{ err error }

func (e *serverError) Error() string              { return e.err.Error() }
func (e *serverError) Unwrap() error              { return e.err }
func (e *serverError) GRPCStatus() *status.Status { s, _ := status.FromError(e.err); return s }

func (e *serverError) Is(target error) bool {
	return target != nil && sentinels[status.Code(e.err)] == target
}

// wrapErr makes a status error match its sentinel; other errors (io.EOF
// ends a stream) are left as they are.
func wrapErr(err error) error {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); !ok || s.Code() == codes.OK {
		return err
	}
	var se *serverError
	if errors.As(err, &se) {
		return err
	}
	return &serverError{err: err}
}

func unaryErrors(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return wrapErr(invoker(ctx, method, req, reply, cc, opts...))
}

func streamErrors(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, wrapErr(err)
	}
	return &errorStream{ClientStream: s}, nil
}

type errorStream struct{ grpc.ClientStream }

func (s *errorStream) RecvMsg(m any) error { return wrapErr(s.ClientStream.RecvMsg(m)) }
func (s *errorStream) SendMsg(m any) error { return wrapErr(s.ClientStream.SendMsg(m)) }
func (s *errorStream) CloseSend() error    { return wrapErr(s.ClientStream.CloseSend()) }
