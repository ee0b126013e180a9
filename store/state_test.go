package store

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// The table, pair by pair: every pair not listed is refused with
// illegal_transition; terminal states have no exits; every state is
// reachable from proposed.
func TestTransitionTable(t *testing.T) {
	legal := 0
	for _, from := range States() {
		for _, to := range States() {
			err := checkTransition(from, to)
			if CanTransition(from, to) {
				legal++
				if err != nil {
					t.Errorf("%s → %s: %v", from, to, err)
				}
				continue
			}
			if code(err) != illegalCode(from) {
				t.Errorf("%s → %s: got %v, want %s", from, to, err, illegalCode(from))
			}
		}
	}
	if legal == 0 {
		t.Fatal("empty table")
	}
	reach := map[EffectState]bool{Proposed: true}
	for changed := true; changed; {
		changed = false
		for from := range reach {
			for _, to := range transitions[from] {
				if !reach[to] {
					reach[to], changed = true, true
				}
			}
		}
	}
	for _, s := range States() {
		if !reach[s] {
			t.Errorf("%s unreachable", s)
		}
		if s.Terminal() != (len(transitions[s]) == 0) {
			t.Errorf("%s terminal mismatch", s)
		}
	}
	for _, s := range []EffectState{Committed, Aborted, Expired, Stale, Failed} {
		if !s.Terminal() {
			t.Errorf("%s should be terminal", s)
		}
	}
	// The horizon: once an adapter may have acted, the effect can never be
	// staled or expired, only settled.
	for _, s := range []EffectState{CommitIntent, Committing, CommitUnknown} {
		if CanTransition(s, Stale) || CanTransition(s, Expired) {
			t.Errorf("%s can be staled or expired", s)
		}
	}
}

// Every illegal transition, through the store's real entry points, against
// an effect actually in each state: refused with illegal_transition, and
// nothing changes (row and ledger head identical).
func TestIllegalTransitionsChangeNothing(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)

	for _, from := range States() {
		f := e.episode(s)
		eff := driveTo(t, s, f, from)
		epoch := f.ep.Epoch
		if from == Stale {
			epoch = 2
		}
		before, err := s.Episode(ctx, f.ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range States() {
			if CanTransition(from, to) {
				continue
			}
			err := attempt(ctx, s, eff, epoch, to)
			if code(err) != illegalCode(from) {
				t.Errorf("%s → %s: got %v, want %s", from, to, err, illegalCode(from))
			}
			after, _ := s.Effect(ctx, eff.ID)
			if after.State != from || after.Revision != eff.Revision || !after.UpdatedAt.Equal(eff.UpdatedAt) {
				t.Errorf("%s → %s changed the effect: %+v", from, to, after)
			}
		}
		afterEp, err := s.Episode(ctx, f.ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		if afterEp.LedgerHead != before.LedgerHead {
			t.Errorf("illegal transitions from %s wrote the ledger", from)
		}
		mustVerify(t, s, f.ep.ID)
	}
}

// attempt asks for from → to through the entry point that owns to.
func attempt(ctx context.Context, s *Postgres, eff Effect, epoch int64, to EffectState) error {
	var err error
	switch to {
	case Proposed:
		_, err = s.ReviseEffect(ctx, Revision{EffectID: eff.ID, FromRevision: eff.Revision, Epoch: epoch,
			Target: json.RawMessage(`{"ref":"refs/heads/x"}`), PayloadDigest: digest("other")})
	case Prepared:
		_, err = s.PrepareEffect(ctx, Prepare{EffectID: eff.ID, Revision: eff.Revision, Epoch: epoch})
	case CommitIntent:
		_, err = s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: eff.Revision, Epoch: epoch}, allow)
	case Committed, CommitUnknown, Failed:
		_, err = s.FinishCommit(ctx, Outcome{EffectID: eff.ID, State: to})
	default:
		_, err = s.Transition(ctx, Transition{EffectID: eff.ID, Revision: eff.Revision, Epoch: epoch, To: to})
	}
	return err
}

// driveTo walks a fresh effect of f into state, through the public API.
func driveTo(t *testing.T, s *Postgres, f fixture, state EffectState) Effect {
	t.Helper()
	ctx := ctxT(t)
	must := func(eff Effect, err error) Effect {
		t.Helper()
		if err != nil {
			t.Fatalf("driving to %s: %v", state, err)
		}
		return eff
	}
	tr := func(eff Effect, to EffectState) Effect {
		return must(s.Transition(ctx, Transition{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1, To: to}))
	}
	eff := must(s.ProposeEffect(ctx, Proposal{EpisodeID: f.ep.ID, Epoch: 1, LeaseID: f.lease.ID, Kind: "http_mutation",
		Class: 3, TargetID: "api", Target: json.RawMessage(`{"path":"/x"}`), PayloadDigest: digest(string(state))}))
	path := map[EffectState][]EffectState{
		Proposed:      {},
		Prepared:      {Prepared},
		Evaluating:    {Prepared, Evaluating},
		Ready:         {Prepared, Evaluating, Ready},
		CommitIntent:  {Prepared, Evaluating, Ready, CommitIntent},
		Committing:    {Prepared, Evaluating, Ready, CommitIntent, Committing},
		Committed:     {Prepared, Evaluating, Ready, CommitIntent, Committing, Committed},
		CommitUnknown: {Prepared, Evaluating, Ready, CommitIntent, CommitUnknown},
		Failed:        {Prepared, Evaluating, Ready, CommitIntent, Failed},
		Aborted:       {Aborted},
		Expired:       {Expired},
		Stale:         {Prepared, Stale},
	}[state]
	for _, to := range path {
		switch to {
		case Prepared:
			eff = must(s.PrepareEffect(ctx, Prepare{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1}))
		case CommitIntent:
			v, err := s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1}, allow)
			eff = must(v.Effect, err)
		case Committed, CommitUnknown, Failed:
			eff = must(s.FinishCommit(ctx, Outcome{EffectID: eff.ID, State: to}))
		case Stale:
			if _, err := s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1, Reason: "test"}); err != nil {
				t.Fatal(err)
			}
			eff = must(s.Effect(ctx, eff.ID))
		default:
			eff = tr(eff, to)
		}
	}
	if eff.State != state {
		t.Fatalf("drove to %s, got %s", state, eff.State)
	}
	return eff
}

// illegalCode is the refusal for leaving from illegally: a stale effect
// reports its staleness (the worker must re-propose), every other state
// illegal_transition.
func illegalCode(from EffectState) protocol.Code {
	if from == Stale {
		return protocol.CodeStaleAuthority
	}
	return protocol.CodeIllegalTransition
}
