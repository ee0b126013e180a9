package api

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// EpisodeController adapts the episode controller to Controller.
type EpisodeController struct {
	Episodes *episode.Controller
	// MaxRepairs is the kernel's max_repairs: a spec that names none gets
	// it, and a spec may not ask for more (an operator's spec never widens
	// what the kernel's configuration allows).
	MaxRepairs int
}

// Start decodes spec strictly (duplicate or unknown keys refused) and
// starts it. The episode outlives the request: the controller detaches
// its supervisor from the request's context.
func (c EpisodeController) Start(ctx context.Context, b []byte) (uuid.UUID, error) {
	spec, err := decodeSpec(b, c.MaxRepairs)
	if err != nil {
		return uuid.Nil, err
	}
	ep, err := c.Episodes.Start(ctx, spec)
	if err != nil {
		return uuid.Nil, err
	}
	return ep.ID(), nil
}

// Check validates spec as Start would (strictly, its policy verified, the
// kernel's bounds), starting nothing, and returns what a task running it
// reserves.
func (c EpisodeController) Check(_ context.Context, b []byte) (store.Reserve, error) {
	spec, err := decodeSpec(b, c.MaxRepairs)
	if err != nil {
		return store.Reserve{}, err
	}
	return c.Episodes.Admit(spec)
}

// decodeSpec admits an operator's episode spec: strictly (duplicate or
// unknown keys refused), with the kernel's max_repairs when it names none
// and never more.
func decodeSpec(b []byte, maxRepairs int) (episode.Spec, error) {
	if err := protocol.CheckShape(b, protocol.Limits{MaxDepth: 16, MaxNodes: 1 << 14}); err != nil {
		return episode.Spec{}, err
	}
	var spec episode.Spec
	if err := protocol.DecodeStrict(b, &spec); err != nil {
		return episode.Spec{}, err
	}
	// Presence, not the zero value: max_repairs 0 is a real request (the
	// first violation contains).
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return episode.Spec{}, protocol.E(protocol.CodeInvalidField)
	}
	if _, named := keys["max_repairs"]; !named {
		spec.MaxRepairs = maxRepairs
	} else if spec.MaxRepairs > maxRepairs {
		return episode.Spec{}, protocol.Errorf(protocol.CodeInvalidField, "max_repairs exceeds the kernel's max_repairs (%d)", maxRepairs)
	}
	return spec, nil
}

// Live reports the controller's view.
func (c EpisodeController) Live(id uuid.UUID) (LiveView, bool) {
	ep, ok := c.Episodes.Episode(id)
	if !ok {
		return LiveView{}, false
	}
	st := ep.Status()
	return LiveView{State: string(st.State), Why: st.Why, Epoch: st.Epoch, LeaseID: st.LeaseID.String(),
		DomainID: st.DomainID.String(), Generation: st.Generation, Repairs: st.Repairs, UnsafeLocal: st.UnsafeLocal}, true
}

// Abort ends a driven episode as aborted: its domain is destroyed first.
func (c EpisodeController) Abort(ctx context.Context, id uuid.UUID, reason string) (bool, error) {
	return c.end(ctx, id, episode.Aborted, reason)
}

// Complete ends a driven episode as completed: its domain is destroyed
// first; effects not yet committed are aborted with it.
func (c EpisodeController) Complete(ctx context.Context, id uuid.UUID, reason string) (bool, error) {
	return c.end(ctx, id, episode.Completed, reason)
}

func (c EpisodeController) end(ctx context.Context, id uuid.UUID, to episode.State, reason string) (bool, error) {
	ep, ok := c.Episodes.Episode(id)
	if !ok {
		return false, nil
	}
	if err := ep.End(ctx, to, reason); err != nil {
		var ill *episode.ErrIllegalTransition
		if errors.As(err, &ill) {
			return true, protocol.Errorf(protocol.CodeIllegalTransition, "%w", err)
		}
		return true, err
	}
	return true, nil
}
