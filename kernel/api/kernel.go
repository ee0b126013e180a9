package api

import (
	"context"
	"net/http"
	"time"
)

// KernelView is the running kernel's own state: the system regulator's
// autonomy level (which caps every lease minted and every commit) and
// what lowered it. An operator, or a driver like the reference scenario,
// reads it before starting work that needs a class the level forbids.
type KernelView struct {
	Autonomy      string    `json:"autonomy"`       // observe | advise | act; "" without a controller
	MaxClass      int       `json:"max_class"`      // the highest effect class the level allows
	Faults        string    `json:"faults"`         // of the last health observation
	AutonomySince time.Time `json:"autonomy_since"` // when the level was entered
}

func (s *Server) kernel(_ context.Context, _ *http.Request) (any, error) {
	if s.cfg.Kernel == nil {
		return KernelView{}, nil
	}
	return s.cfg.Kernel(), nil
}

// Kernel reads the running kernel's state.
func (c *Client) Kernel(ctx context.Context) (KernelView, error) {
	var out KernelView
	return out, c.do(ctx, http.MethodGet, "/v1/kernel", nil, nil, &out)
}
