package broker

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// outsideEnv is an environment whose artifact target "drafts" (class 3)
// the lease does not grant (wideSpec grants artifacts elsewhere), with
// escalate set as asked; parked collects what AwaitingHuman heard.
func outsideEnv(t *testing.T, escalate bool) (e *env, pub string, parked func() []store.Effect) {
	pub = filepath.Join(t.TempDir(), "drafts")
	if err := os.Mkdir(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heard []store.Effect
	e = newEnv(t, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"drafts": {Dir: pub, Class: 3}}})
		cfg.EscalateOutsideLease = escalate
		cfg.AwaitingHuman = func(e store.Effect) {
			mu.Lock()
			heard = append(heard, e)
			mu.Unlock()
		}
	})
	return e, pub, func() []store.Effect {
		mu.Lock()
		defer mu.Unlock()
		return append([]store.Effect(nil), heard...)
	}
}

// TestEffectOutsideLeaseOpensAction (issue 25 §2): under
// EscalateOutsideLease, a proposal the lease does not grant is recorded to
// wait on a human — an Action naming it exactly and what the lease lacks,
// its episode told to park — and commits only once that Action is
// approved; the approval lifts the grant for that one operation, so the
// next proposal is a new Action, and a denial commits nothing. The lease's
// byte budget still holds. Without the setting the lease is a hard wall.
func TestEffectOutsideLeaseOpensAction(t *testing.T) {
	ctx := ctxT(t)
	t.Run("refused", func(t *testing.T) {
		e, _, _ := outsideEnv(t, false)
		wantErr(t, e.do(prepareReq(e, "artifact", "drafts", map[string]string{"name": "a.bin"}, []byte("a"))), protocol.CodeForbidden)
		if effs, err := e.store.ListEffects(ctx, e.ep.ID, 10); err != nil || len(effs) != 0 {
			t.Fatalf("a refused proposal left effects: %+v, %v", effs, err)
		}
	})

	e, pub, parked := outsideEnv(t, true)
	p := mustOK(t, e.do(prepareReq(e, "artifact", "drafts", map[string]string{"name": "a.bin"}, []byte("a"))))
	eff, err := e.store.Effect(ctx, mustUUID(p.ID))
	if err != nil {
		t.Fatal(err)
	}
	if eff.Class != 3 || eff.OutsideLease != "no grant of artifact on drafts at class 3" || !eff.AwaitsHuman() {
		t.Fatalf("the proposal was recorded as %+v", eff)
	}
	// Not before its human: evaluate leaves it waiting, with its Action.
	if r := mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p))); r.State != string(store.Evaluating) {
		t.Fatalf("evaluated to %s, want evaluating", r.State)
	}
	if eff, err = e.store.Effect(ctx, eff.ID); err != nil {
		t.Fatal(err)
	}
	open, err := e.store.Actions(ctx, e.ep.ID, false)
	if err != nil || len(open) != 1 || !open[0].Binds(eff) || !strings.Contains(open[0].Reason, eff.OutsideLease) {
		t.Fatalf("open actions: %+v, %v", open, err)
	}
	if h := parked(); len(h) != 1 || h[0].ID != eff.ID {
		t.Fatalf("AwaitingHuman heard %+v", h)
	}
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeApprovalRequired)
	if _, err := os.Stat(filepath.Join(pub, "a.bin")); !os.IsNotExist(err) {
		t.Fatalf("published before its approval: %v", err)
	}
	// Approved: that one operation commits.
	sig, err := SignApproval(e.key, "operator", ApprovalFor(eff, store.VerdictAllow))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.broker.Approve(ctx, eff.ID, sig); err != nil || got.State != store.Ready {
		t.Fatalf("approve: %+v, %v", got, err)
	}
	if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != string(store.Committed) {
		t.Fatalf("the approved effect: %s", c.State)
	}
	if b, err := os.ReadFile(filepath.Join(pub, "a.bin")); err != nil || string(b) != "a" {
		t.Fatalf("published %q, %v", b, err)
	}

	// The grant was lifted once: the next proposal waits on its own
	// Action, and denied, it never commits.
	p2 := mustOK(t, e.do(prepareReq(e, "artifact", "drafts", map[string]string{"name": "b.bin"}, []byte("b"))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p2)))
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p2)), protocol.CodeApprovalRequired)
	eff2, err := e.store.Effect(ctx, mustUUID(p2.ID))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.ActionFor(ctx, eff2.ID, eff2.Revision, eff2.Epoch); err != nil {
		t.Fatalf("the second proposal has no Action of its own: %v", err)
	}
	// Made ready behind the broker's back (a compromised service account
	// with the table's rights), it still has no approved Action: check 7.
	adminExec(t, e, `UPDATE effects SET state = 'ready' WHERE id = $1`, eff2.ID)
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p2)), protocol.CodeApprovalRequired)
	adminExec(t, e, `UPDATE effects SET state = 'evaluating' WHERE id = $1`, eff2.ID)
	deny, err := SignApproval(e.key, "operator", ApprovalFor(eff2, store.VerdictDeny))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.broker.Approve(ctx, eff2.ID, deny); err != nil {
		t.Fatalf("deny: %v", err)
	}
	if r := e.do(byEffectReq(e, protocol.WorkerCommit, p2)); r.OK {
		t.Fatalf("the denied effect committed: %+v", r.Result)
	}
	if _, err := os.Stat(filepath.Join(pub, "b.bin")); !os.IsNotExist(err) {
		t.Fatalf("published a denied effect: %v", err)
	}

	// The lease's budgets still hold outside its grant: approved, an
	// effect over its bytes per effect is refused at the commit.
	e.grantSpec(e.epoch(), func() authority.Spec { s := wideSpec(); s.Budget.BytesPerEffect = 4; return s }())
	p3 := mustOK(t, e.do(prepareReq(e, "artifact", "drafts", map[string]string{"name": "c.bin"}, []byte("too large"))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p3)))
	eff3, err := e.store.Effect(ctx, mustUUID(p3.ID))
	if err != nil {
		t.Fatal(err)
	}
	if sig, err = SignApproval(e.key, "operator", ApprovalFor(eff3, store.VerdictAllow)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.broker.Approve(ctx, eff3.ID, sig); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p3)), protocol.CodeLimitExceeded)
	if _, err := os.Stat(filepath.Join(pub, "c.bin")); !os.IsNotExist(err) {
		t.Fatalf("published over the lease's bytes: %v", err)
	}
}
