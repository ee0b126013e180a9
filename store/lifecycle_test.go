package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

func TestCommitLifecycle(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	eff := f.ready(t, s)
	if eff.State != Ready || eff.VersionVector == nil || eff.VersionVector.PolicyVersion != 1 || eff.VersionVector.LeaseID != f.lease.ID {
		t.Fatalf("ready effect: %+v", eff)
	}
	if _, err := s.RecordDecision(ctx, NewDecision{EffectID: eff.ID, Revision: 1, Epoch: 1, Kind: DecisionVerification,
		Verdict: VerdictAllow, Body: []byte(`{"tests":"pass"}`)}); err != nil {
		t.Fatal(err)
	}
	var seen CommitView
	view, err := s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, func(_ context.Context, v CommitView) error {
		seen = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen.Decisions) != 1 || seen.Lease.ID != f.lease.ID || seen.Episode.Epoch != 1 || seen.Effect.State != Ready {
		t.Fatalf("commit view: %+v", seen)
	}
	if view.Effect.State != CommitIntent || view.Effect.CommitIntentAt == nil {
		t.Fatalf("after BeginCommit: %+v", view.Effect)
	}
	un, err := s.Unsettled(ctx, f.ep.ID)
	if err != nil || len(un) != 1 || un[0].ID != eff.ID {
		t.Fatalf("unsettled: %v %v", un, err)
	}
	if _, err := s.Transition(ctx, Transition{EffectID: eff.ID, Revision: 1, Epoch: 1, To: Committing}); err != nil {
		t.Fatal(err)
	}
	done, err := s.FinishCommit(ctx, Outcome{EffectID: eff.ID, State: Committed, Receipt: json.RawMessage(`{"oid":"abc"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if done.State != Committed || done.OutcomeAt == nil {
		t.Fatalf("finished: %+v", done)
	}
	if un, _ := s.Unsettled(ctx, f.ep.ID); len(un) != 0 {
		t.Fatalf("still unsettled: %v", un)
	}
	got := kinds(t, s, f.ep.ID)
	want := "episode_created,lease_granted,effect_proposed,effect_transition,effect_transition,effect_transition," +
		"decision_recorded,effect_transition,effect_transition,effect_transition"
	if got != want {
		t.Fatalf("ledger kinds\n got %s\nwant %s", got, want)
	}
	mustVerify(t, s, f.ep.ID)
	got2, err := s.Episode(ctx, f.ep.ID)
	var spec map[string]string
	if err != nil || json.Unmarshal(got2.Spec, &spec) != nil || spec["intent"] != "test" {
		t.Fatalf("episode spec: %s %v", got2.Spec, err)
	}
}

func TestCommitCheckRefusal(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	eff := f.ready(t, s)
	var err error
	req := CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}
	_, err = s.BeginCommit(ctx, req, func(context.Context, CommitView) error { return errors.New("regime forbids class 3") })
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = s.BeginCommit(ctx, req, func(context.Context, CommitView) error { return protocol.E(protocol.CodeForbidden) })
	wantCode(t, err, protocol.CodeForbidden)
	if got, _ := s.Effect(ctx, eff.ID); got.State != Ready {
		t.Fatalf("refused commit changed state to %s", got.State)
	}
	// Wrong revision and wrong request epoch.
	_, err = s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 2, Epoch: 1}, allow)
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 2}, allow)
	wantCode(t, err, protocol.CodeStaleRequestEpoch)
	// A revoked lease fences the commit.
	if _, err := s.RevokeLease(ctx, f.lease.ID, "narrowed"); err != nil {
		t.Fatal(err)
	}
	_, err = s.BeginCommit(ctx, req, allow)
	wantCode(t, err, protocol.CodeStaleAuthority)
	mustVerify(t, s, f.ep.ID)
}
