package broker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// humanDecisions counts the human decisions recorded for an effect.
func humanDecisions(t *testing.T, e *env, id uuid.UUID) int {
	t.Helper()
	ds, err := e.store.Decisions(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range ds {
		if d.Kind == store.DecisionHuman {
			n++
		}
	}
	return n
}

// adminExec runs one statement as the database's owner: what a
// compromised service account with the table's rights could do.
func adminExec(t *testing.T, e *env, sql string, args ...any) {
	t.Helper()
	c, err := pgx.Connect(ctxT(t), e.cluster.AdminConnString(e.db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// TestActionThreeChecks: a class 4 effect's evaluation opens one durable
// Action naming its exact operation (check 1); an answer to it once the
// effect has been revised records nothing (check 2), while the revision's
// own Action is answered through Approve; and the commit needs that
// approved Action still naming the effect exactly (check 3): an Action
// row altered after its approval stops the commit.
func TestActionThreeChecks(t *testing.T) {
	e, pub := artifactEnv(t)
	ctx := ctxT(t)
	p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "a.bin"}, []byte("a"))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
	first, err := e.store.Effect(ctx, mustUUID(p.ID))
	if err != nil {
		t.Fatal(err)
	}

	// Check 1: one open Action, naming the effect exactly.
	open, err := e.store.Actions(ctx, e.ep.ID, false)
	if err != nil || len(open) != 1 {
		t.Fatalf("open actions: %+v, %v", open, err)
	}
	a1 := open[0]
	if !a1.Binds(first) || a1.State != store.ActionPending || a1.Kind != "artifact" || a1.TargetID != "releases" {
		t.Fatalf("action %+v does not name %+v", a1, first)
	}
	// Evaluating again opens no second one.
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
	if all, _ := e.store.Actions(ctx, e.ep.ID, true); len(all) != 1 {
		t.Fatalf("%d actions after a second evaluate", len(all))
	}

	// The worker re-proposes other bytes: revision 2, its own Action.
	req := prepareReq(e, "artifact", "releases", map[string]string{"name": "a.bin"}, []byte("b"))
	req.EffectID, req.Revision = p.ID, p.Revision
	p2 := mustOK(t, e.do(req))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p2)))
	second, err := e.store.Effect(ctx, mustUUID(p2.ID))
	if err != nil || second.Revision != 2 {
		t.Fatalf("revised effect: %+v, %v", second, err)
	}

	// Check 2: the first Action's answer — a valid signature over the
	// revision it named — records nothing.
	sig, err := SignApproval(e.key, "operator", ApprovalFor(first, store.VerdictAllow))
	if err != nil {
		t.Fatal(err)
	}
	d1, err := e.broker.approvalDecision(first, first.Epoch, sig)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.store.ResolveAction(ctx, store.ActionResolution{ActionID: a1.ID, Decision: d1}); protocol.AsWire(err).Code != protocol.CodeStaleAuthority {
		t.Fatalf("answering the superseded action: %v, want stale_authority", err)
	}
	// Nor does a valid answer for the current revision given to the
	// superseded Action: an Action is answered only for what it names.
	sig2, err := SignApproval(e.key, "operator", ApprovalFor(second, store.VerdictAllow))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := e.broker.approvalDecision(second, second.Epoch, sig2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.store.ResolveAction(ctx, store.ActionResolution{ActionID: a1.ID, Decision: d2}); err == nil {
		t.Fatal("the superseded action took the current revision's approval")
	}
	if n := humanDecisions(t, e, second.ID); n != 0 {
		t.Fatalf("%d human decisions recorded", n)
	}
	if a, _ := e.store.Action(ctx, a1.ID); a.State != store.ActionSuperseded {
		t.Fatalf("first action is %s, want superseded", a.State)
	}
	a2, err := e.store.ActionFor(ctx, second.ID, 2, second.Epoch)
	if err != nil || !a2.Binds(second) {
		t.Fatalf("revision 2's action: %+v, %v", a2, err)
	}
	if got, err := e.broker.Approve(ctx, second.ID, sig2); err != nil || got.State != store.Ready {
		t.Fatalf("approve: %+v, %v", got, err)
	}
	if a, _ := e.store.Action(ctx, a2.ID); a.State != store.ActionApproved || a.DecisionID == nil {
		t.Fatalf("revision 2's action after approval: %+v", a)
	}

	// Check 3: the approved Action altered after its approval (by someone
	// with the table's rights) no longer names the effect: no commit.
	adminExec(t, e, `UPDATE actions SET payload_digest = $2 WHERE id = $1`, a2.ID, Digest([]byte("other")))
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p2)), protocol.CodeApprovalRequired)
	if _, err := os.Stat(filepath.Join(pub, "a.bin")); !os.IsNotExist(err) {
		t.Fatalf("published anyway: %v", err)
	}
	adminExec(t, e, `UPDATE actions SET payload_digest = $2 WHERE id = $1`, a2.ID, second.PayloadDigest)
	if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p2))); c.State != "committed" {
		t.Fatalf("commit with the action restored: %s", c.State)
	}
	if b, err := os.ReadFile(filepath.Join(pub, "a.bin")); err != nil || string(b) != "b" {
		t.Fatalf("published %q, %v; want revision 2's bytes", b, err)
	}
}

// TestReplayedApprovalMintsOnce: the same approval replayed, a second
// operator's approval and the worker carrying an approval at evaluate, all
// at once, resolve the Action once: one human decision, one
// action_resolved event, one commit. A later deny is refused.
func TestReplayedApprovalMintsOnce(t *testing.T) {
	pub := filepath.Join(t.TempDir(), "releases")
	if err := os.Mkdir(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	second, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"releases": {Dir: pub}}})
		cfg.DecisionKeys["operator-2"] = second
	})
	ctx := ctxT(t)
	p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "r.bin"}, []byte("r"))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
	eff, err := e.store.Effect(ctx, mustUUID(p.ID))
	if err != nil {
		t.Fatal(err)
	}
	mine, err := SignApproval(e.key, "operator", ApprovalFor(eff, store.VerdictAllow))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := SignApproval(other, "operator-2", ApprovalFor(eff, store.VerdictAllow))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 3 {
			case 0:
				_, _ = e.broker.Approve(ctx, eff.ID, mine)
			case 1:
				_, _ = e.broker.Approve(ctx, eff.ID, theirs)
			default:
				req := byEffectReq(e, protocol.WorkerEvaluate, p)
				req.Approval = mine
				_ = e.do(req)
			}
		}()
	}
	wg.Wait()
	if n := humanDecisions(t, e, eff.ID); n != 1 {
		t.Fatalf("%d human decisions recorded, want 1", n)
	}
	a, err := e.store.ActionFor(ctx, eff.ID, eff.Revision, eff.Epoch)
	if err != nil || a.State != store.ActionApproved {
		t.Fatalf("action: %+v, %v", a, err)
	}
	evs, err := e.store.Events(ctx, e.ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	resolved := 0
	for _, ev := range evs {
		if ev.Kind == "action_resolved" {
			resolved++
		}
	}
	if resolved != 1 {
		t.Fatalf("%d action_resolved events, want 1", resolved)
	}
	// The same answer once more is answered from the record.
	if got, err := e.broker.Approve(ctx, eff.ID, mine); err != nil || got.State != store.Ready {
		t.Fatalf("replayed approval: %+v, %v", got, err)
	}
	deny, err := SignApproval(e.key, "operator", ApprovalFor(eff, store.VerdictDeny))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.broker.Approve(ctx, eff.ID, deny); protocol.AsWire(err).Code != protocol.CodeIllegalTransition {
		t.Fatalf("a deny after the approval: %v, want illegal_transition", err)
	}
	if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != "committed" {
		t.Fatal(c.State)
	}
	if n := humanDecisions(t, e, eff.ID); n != 1 {
		t.Fatalf("%d human decisions after the commit, want 1", n)
	}
	if _, err := e.broker.Approve(ctx, eff.ID, mine); err == nil {
		t.Fatal("an approval of a committed effect was accepted")
	}
}

// TestActionSnoozeAndDismiss: a snoozed Action leaves the open list until
// its time (the database's clock plus what the operator asked), a
// dismissal records its feedback from a closed set and closes it, and a
// dismissed Action takes no answer.
func TestActionSnoozeAndDismiss(t *testing.T) {
	e, _ := artifactEnv(t)
	ctx := ctxT(t)
	p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "s.bin"}, []byte("s"))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
	eff, err := e.store.Effect(ctx, mustUUID(p.ID))
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.store.ActionFor(ctx, eff.ID, eff.Revision, eff.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SnoozeAction(ctx, a.ID, 0); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Fatalf("a zero snooze: %v", err)
	}
	s, err := e.store.SnoozeAction(ctx, a.ID, time.Hour)
	if err != nil || s.SnoozedUntil == nil || s.SnoozedUntil.Sub(s.CreatedAt) < time.Hour-time.Minute {
		t.Fatalf("snooze: %+v, %v", s, err)
	}
	if open, _ := e.store.Actions(ctx, e.ep.ID, false); len(open) != 0 {
		t.Fatalf("a snoozed action is open: %+v", open)
	}
	if all, _ := e.store.Actions(ctx, e.ep.ID, true); len(all) != 1 {
		t.Fatalf("all actions: %+v", all)
	}
	if _, err := e.store.DismissAction(ctx, a.ID, "because"); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Fatalf("free-text feedback: %v", err)
	}
	d, err := e.store.DismissAction(ctx, a.ID, "need_more_info")
	if err != nil || d.State != store.ActionDismissed || d.Feedback != "need_more_info" {
		t.Fatalf("dismiss: %+v, %v", d, err)
	}
	sig, err := SignApproval(e.key, "operator", ApprovalFor(eff, store.VerdictAllow))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.broker.Approve(ctx, eff.ID, sig); protocol.AsWire(err).Code != protocol.CodeIllegalTransition {
		t.Fatalf("approving a dismissed action: %v", err)
	}
	if n := humanDecisions(t, e, eff.ID); n != 0 {
		t.Fatalf("%d human decisions", n)
	}
}

// TestActionsAreBounded: with store.MaxPendingActions decisions waiting,
// the next class 4 effect is refused at evaluate as
// effect_broker_saturated and stays prepared; once one is answered, it
// proceeds.
func TestActionsAreBounded(t *testing.T) {
	e, _ := artifactEnv(t)
	ctx := ctxT(t)
	// A prepared effect whose id the waiting rows borrow (each another
	// revision of it, so each is its own pending Action).
	filler := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "f.bin"}, []byte("f"))))
	// They wait in another episode, so this one's own bound is not what
	// refuses.
	others, err := e.store.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"intent":"others"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	adminExec(t, e, `INSERT INTO actions (id, episode_id, effect_id, revision, epoch, payload_digest, kind, target_id, target, reason,
		priority, state, created_at) SELECT gen_random_uuid(), $1, $2, 100 + g, 1, $3, 'artifact', 'releases', '{}', 'filler', 0,
		'pending', now() FROM generate_series(1, $4) g`, others.ID, mustUUID(filler.ID), Digest([]byte("f")), store.MaxPendingActions-1)
	last := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "l.bin"}, []byte("l"))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, last)))
	over := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "o.bin"}, []byte("o"))))
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, over)), protocol.CodeEffectBrokerSaturated)
	if eff, _ := e.store.Effect(ctx, mustUUID(over.ID)); eff.State != store.Prepared {
		t.Fatalf("the refused effect is %s, want prepared", eff.State)
	}
	lastEff, _ := e.store.Effect(ctx, mustUUID(last.ID))
	a, err := e.store.ActionFor(ctx, lastEff.ID, lastEff.Revision, lastEff.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.DismissAction(ctx, a.ID, "no_longer_relevant"); err != nil {
		t.Fatal(err)
	}
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, over)))
}

// TestActionsAreBoundedPerEpisode: one episode's worker opens at most
// store.MaxPendingActionsPerEpisode Actions; the next of its class 4
// effects is refused at evaluate as effect_broker_saturated and stays
// prepared, while another episode still opens its own.
func TestActionsAreBoundedPerEpisode(t *testing.T) {
	e, _ := artifactEnv(t)
	ctx := ctxT(t)
	evaluate := func(name string) *protocol.WorkerResponse {
		p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": name}, []byte(name))))
		return e.do(byEffectReq(e, protocol.WorkerEvaluate, p))
	}
	for i := range store.MaxPendingActionsPerEpisode {
		mustOK(t, evaluate(fmt.Sprintf("p%d.bin", i)))
	}
	wantErr(t, evaluate("over.bin"), protocol.CodeEffectBrokerSaturated)
	if open, err := e.store.Actions(ctx, e.ep.ID, false); err != nil || len(open) != store.MaxPendingActionsPerEpisode {
		t.Fatalf("%d open actions, %v", len(open), err)
	}
	// Another episode, its own lease: not refused for this one's.
	other, err := e.store.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"intent":"other"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.ep = other
	e.grant(1)
	mustOK(t, evaluate("other.bin"))
}
