package flight

import (
	"context"
	"encoding/json"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/state"
)

// AddProgramRequest is the body of the program-add action.
type AddProgramRequest struct {
	Name string `json:"name"`
	// Path is the executable's path on the server's machine.
	Path string `json:"path"`
	// SHA256, when given, must be the file's checksum.
	SHA256 string `json:"sha256,omitempty"`
	// Network lets stages that ask for it reach the network.
	Network bool `json:"network,omitempty"`
}

func (s *Service) addProgram(ctx context.Context, body []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	var req AddProgramRequest
	if err := decodeStrict(body, &req); err != nil {
		return nil, badBody("program-add", body, err)
	}
	if err := s.allow(ctx, auth.Admin, "", "program-add "+req.Name); err != nil {
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
	return listOf(ps), err
}

func (s *Service) removeProgram(ctx context.Context, body []byte) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	var req struct {
		Name string `json:"name"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return nil, badBody("program-remove", body, err)
	}
	if err := s.allow(ctx, auth.Admin, "", "program-remove "+req.Name); err != nil {
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

// AddProgram registers an executable on the server (admin).
func (c *Client) AddProgram(ctx context.Context, req AddProgramRequest) (state.Program, error) {
	var out state.Program
	err := c.action(ctx, "program-add", req, func(b []byte) error { return json.Unmarshal(b, &out) })
	return out, err
}

// Programs lists the registered programs.
func (c *Client) Programs(ctx context.Context) ([]state.Program, error) {
	return collect[state.Program](ctx, c, "program-list", struct{}{})
}

// RemoveProgram unregisters a program (admin).
func (c *Client) RemoveProgram(ctx context.Context, name string) error {
	return c.action(ctx, "program-remove", map[string]string{"name": name}, func([]byte) error { return nil })
}
