package broker

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestOperatorSettlesUnknownEffect: an effect left commit_unknown because
// its target was removed from the configuration is settled by an
// operator's word — recorded with their uid and reason, once — while an
// effect the target can still decide is decided by the target, and an
// operator who says otherwise is refused. Nothing but commit_unknown is
// settled.
func TestOperatorSettlesUnknownEffect(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)
	// An effect cut off inside its commit: the kernel "dies" after
	// committing is durable, before the ref moves.
	p, release := cutOffInCommit(t, e, gc, f)
	defer release()
	ids := []uuid.UUID{uuid.MustParse(p.ID)}
	ctx := ctxT(t)
	cfg := e.cfg
	cfg.Adapters = nil // restarted without the target
	gone, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	if eff, _ := e.store.Effect(ctx, ids[0]); eff.State != store.CommitUnknown {
		t.Fatalf("after recovery without its target: %s", eff.State)
	}
	// The target is gone: the operator's word settles it.
	eff, err := gone.Settle(ctx, ids[0], false, 1000, "ref checked by hand: still at the base")
	if err != nil || eff.State != store.Failed {
		t.Fatalf("settle: %s, %v", eff.State, err)
	}
	var rc map[string]any
	json.Unmarshal(eff.Receipt, &rc)
	if rc["settled_by"] != "operator" || rc["uid"] != float64(1000) || rc["reason"] != "ref checked by hand: still at the base" {
		t.Fatalf("receipt %s", eff.Receipt)
	}
	if _, err := gone.Settle(ctx, ids[0], true, 1000, "again"); protocol.AsWire(err).Code != protocol.CodeIllegalTransition {
		t.Fatalf("a second settle: %v", err)
	}
	if rep, err := e.store.VerifyLedger(ctx, eff.EpisodeID); err != nil {
		t.Fatalf("ledger: %+v %v", rep, err)
	}
}

// TestTargetOutranksTheOperator: a commit_unknown effect whose target is
// still configured is decided by the target's reconciliation; an
// operator who claims the opposite is refused, and the effect takes the
// target's answer.
func TestTargetOutranksTheOperator(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)
	p, release := cutOffInCommit(t, e, gc, f)
	defer release()
	ctx := ctxT(t)
	id := uuid.MustParse(p.ID)
	eff, _ := e.store.Effect(ctx, id)
	// Put it in commit_unknown as an ambiguous adapter would leave it.
	if _, err := e.store.FinishCommit(ctx, store.Outcome{EffectID: id, State: store.CommitUnknown, Receipt: json.RawMessage(`{}`)}); err != nil {
		t.Fatalf("%s: %v", eff.State, err)
	}
	// The ref is still at the base: the target says not committed.
	got, err := e.broker.Settle(ctx, id, true, 1000, "I think it landed")
	if protocol.AsWire(err).Code != protocol.CodeIllegalTransition || got.State != store.Failed {
		t.Fatalf("operator contradicting the target: %s, %v", got.State, err)
	}
	if _, err := e.broker.Settle(ctx, id, false, 1000, "late"); protocol.AsWire(err).Code != protocol.CodeIllegalTransition {
		t.Fatalf("settling a settled effect: %v", err)
	}
}

// cutOffInCommit prepares and evaluates the fixture's fix and starts its
// commit, holding it after committing is durable and before the ref moves
// (where a kernel that dies leaves it); release lets it finish.
func cutOffInCommit(t *testing.T, e *env, gc *GitCommit, f *gitFixture) (*protocol.EffectResult, func()) {
	t.Helper()
	p := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), f.patch(fixAuth))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
	entered, release := make(chan struct{}), make(chan struct{})
	gc.BeforeUpdateRef = func() { close(entered); <-release }
	done := make(chan struct{})
	go func() { defer close(done); e.do(byEffectReq(e, protocol.WorkerCommit, p)) }()
	<-entered
	gc.BeforeUpdateRef = nil
	return p, func() { close(release); <-done }
}
