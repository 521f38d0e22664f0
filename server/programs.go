package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/state"
)

func (s *Service) addProgram(ctx context.Context, body []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	req, err := decode[flight.AddProgramRequest](flight.ActProgramAdd, body, nil)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Admin, "", flight.ActProgramAdd.Name+" "+req.Name); err != nil {
		return nil, err
	}
	p, err := eng.AddProgram(req.Name, req.Path, req.SHA256, req.Network, caller(ctx))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return p, nil
}

func (s *Service) listPrograms(ctx context.Context, _ []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	ps, err := eng.Programs()
	if !s.may(ctx, auth.Admin, "") {
		// Jobs name programs by name: where the server keeps them, and
		// where an admin registered them from, is the admins' business.
		for i := range ps {
			ps[i].Path, ps[i].Source = "", ""
		}
	}
	return listOf(ps), err
}

func (s *Service) removeProgram(ctx context.Context, body []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	req, err := decode[struct {
		Name string `json:"name"`
	}](flight.ActProgramRemove, body, nil)
	if err != nil {
		return nil, err
	}
	if err := s.allow(ctx, auth.Admin, "", flight.ActProgramRemove.Name+" "+req.Name); err != nil {
		return nil, err
	}
	if err := eng.RemoveProgram(req.Name); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "%v; `plumb program list` shows what is registered", err)
		}
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return map[string]string{"removed": req.Name}, nil
}
