package store

import (
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestPrepareInTheProposal: a proposal (or revision) that carries its
// trajectory is recorded prepared, with the version vector PrepareEffect
// would capture and the same ledger events, in one transaction; refused,
// it records nothing.
func TestPrepareInTheProposal(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	tr := &Trajectory{Version: 7, Regime: "stable"}
	prop := Proposal{EpisodeID: f.ep.ID, Epoch: 1, LeaseID: f.lease.ID, Kind: "git_commit", Class: 3,
		TargetID: "repo", Target: []byte(`{"ref":"refs/heads/main"}`), PayloadDigest: digest("patch"), Prepare: tr}
	before := kinds(t, s, f.ep.ID)
	eff, err := s.ProposeEffect(ctx, prop)
	if err != nil {
		t.Fatal(err)
	}
	vv := eff.VersionVector
	if eff.State != Prepared || vv == nil || vv.TrajectoryVersion != 7 || vv.LeaseID != f.lease.ID || vv.EffectRevision != 1 {
		t.Fatalf("proposed and prepared: %+v", eff)
	}
	if stored, err := s.Effect(ctx, eff.ID); err != nil || stored.State != Prepared || *stored.VersionVector != *vv {
		t.Fatalf("stored: %+v %v", stored, err)
	}
	if got, want := kinds(t, s, f.ep.ID), before+",effect_proposed,effect_transition"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	rev, err := s.ReviseEffect(ctx, Revision{EffectID: eff.ID, FromRevision: 1, Epoch: 1, Target: prop.Target,
		PayloadDigest: digest("patch 2"), Prepare: tr})
	if err != nil {
		t.Fatal(err)
	}
	if rev.State != Prepared || rev.Revision != 2 || rev.VersionVector == nil || rev.VersionVector.EffectRevision != 2 {
		t.Fatalf("revised and prepared: %+v", rev)
	}

	// A revoked lease refuses the whole proposal and the whole revision.
	if _, err := s.RevokeLease(ctx, f.lease.ID, "test"); err != nil {
		t.Fatal(err)
	}
	before = kinds(t, s, f.ep.ID)
	_, err = s.ProposeEffect(ctx, prop)
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = s.ReviseEffect(ctx, Revision{EffectID: eff.ID, FromRevision: 2, Epoch: 1, Target: prop.Target,
		PayloadDigest: digest("patch 3"), Prepare: tr})
	wantCode(t, err, protocol.CodeStaleAuthority)
	if got := kinds(t, s, f.ep.ID); got != before {
		t.Fatalf("a refusal was recorded: %s", got)
	}
	if stored, _ := s.Effect(ctx, eff.ID); stored.Revision != 2 || stored.State != Prepared {
		t.Fatalf("a refused revision changed the effect: %+v", stored)
	}
	mustVerify(t, s, f.ep.ID)
}

// TestEvaluateInOneTransaction: Evaluate is Transition(evaluating),
// RecordDecision and Transition(ready) in one transaction, with their
// checks and their ledger events; any refusal changes nothing.
func TestEvaluateInOneTransaction(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	prepared := func() Effect {
		t.Helper()
		eff, err := s.ProposeEffect(ctx, Proposal{EpisodeID: f.ep.ID, Epoch: 1, LeaseID: f.lease.ID, Kind: "git_commit", Class: 3,
			TargetID: "repo", Target: []byte(`{}`), PayloadDigest: digest("patch"), Prepare: &Trajectory{Version: 1, Regime: "stable"}})
		if err != nil {
			t.Fatal(err)
		}
		return eff
	}
	decision := func(eff Effect, verdict string) NewDecision {
		return NewDecision{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1, Kind: DecisionHuman, Verdict: verdict,
			Body: []byte(`{"decision":"` + verdict + `"}`), KeyID: "operator", Signature: make([]byte, 64)}
	}

	eff := prepared()
	before := kinds(t, s, f.ep.ID)
	got, err := s.Evaluate(ctx, Evaluation{EffectID: eff.ID, Revision: 1, Epoch: 1, Decisions: []NewDecision{decision(eff, VerdictAllow)}, Ready: true})
	if err != nil || got.State != Ready {
		t.Fatalf("evaluate: %+v %v", got, err)
	}
	if k, want := kinds(t, s, f.ep.ID), before+",effect_transition,decision_recorded,effect_transition"; k != want {
		t.Fatalf("events %s, want %s", k, want)
	}
	view, err := s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, allow)
	if err != nil || len(view.Decisions) != 1 || view.Decisions[0].Kind != DecisionHuman {
		t.Fatalf("commit view: %+v %v", view.Decisions, err)
	}

	// Without Ready it stops at evaluating; a deny may be recorded there.
	eff = prepared()
	if got, err := s.Evaluate(ctx, Evaluation{EffectID: eff.ID, Revision: 1, Epoch: 1, Decisions: []NewDecision{decision(eff, VerdictDeny)}}); err != nil || got.State != Evaluating {
		t.Fatalf("evaluate without ready: %+v %v", got, err)
	}

	eff = prepared()
	for name, tc := range map[string]struct {
		ev   Evaluation
		want protocol.Code
	}{
		"stale request epoch": {Evaluation{EffectID: eff.ID, Revision: 1, Epoch: 2, Ready: true}, protocol.CodeStaleRequestEpoch},
		"superseded revision": {Evaluation{EffectID: eff.ID, Revision: 2, Epoch: 1, Ready: true}, protocol.CodeStaleAuthority},
		"ready over a deny":   {Evaluation{EffectID: eff.ID, Revision: 1, Epoch: 1, Decisions: []NewDecision{decision(eff, VerdictDeny)}, Ready: true}, protocol.CodeInvalidField},
		"another revision's decision": {Evaluation{EffectID: eff.ID, Revision: 1, Epoch: 1,
			Decisions: []NewDecision{{EffectID: eff.ID, Revision: 2, Epoch: 1, Kind: DecisionSemantic, Verdict: VerdictAllow}}}, protocol.CodeInvalidField},
		"unsigned human decision": {Evaluation{EffectID: eff.ID, Revision: 1, Epoch: 1,
			Decisions: []NewDecision{{EffectID: eff.ID, Revision: 1, Epoch: 1, Kind: DecisionHuman, Verdict: VerdictAllow}}}, protocol.CodeInvalidField},
	} {
		before := kinds(t, s, f.ep.ID)
		_, err := s.Evaluate(ctx, tc.ev)
		if code(err) != tc.want {
			t.Fatalf("%s: got %v, want %s", name, err, tc.want)
		}
		if k := kinds(t, s, f.ep.ID); k != before {
			t.Fatalf("%s: a refusal was recorded: %s", name, k)
		}
		if stored, _ := s.Effect(ctx, eff.ID); stored.State != Prepared {
			t.Fatalf("%s: a refusal moved the effect to %s", name, stored.State)
		}
	}
	// A later step's refusal rolls back the earlier ones: ready from ready
	// is illegal, and neither the decision nor anything else is kept.
	ready, err := s.Evaluate(ctx, Evaluation{EffectID: eff.ID, Revision: 1, Epoch: 1, Ready: true})
	if err != nil {
		t.Fatal(err)
	}
	before = kinds(t, s, f.ep.ID)
	_, err = s.Evaluate(ctx, Evaluation{EffectID: ready.ID, Revision: 1, Epoch: 1, Decisions: []NewDecision{decision(ready, VerdictAllow)}, Ready: true})
	wantCode(t, err, protocol.CodeIllegalTransition)
	if k := kinds(t, s, f.ep.ID); k != before {
		t.Fatalf("a refused evaluation kept its decision: %s", k)
	}
	mustVerify(t, s, f.ep.ID)
}
