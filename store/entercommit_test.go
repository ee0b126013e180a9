package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// transitionsOf lists the "to" of an effect's effect_transition events, in
// ledger order.
func transitionsOf(t *testing.T, s *Postgres, f fixture, effect string) []string {
	t.Helper()
	es, err := s.Events(ctxT(t), f.ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		var b struct {
			EffectID string `json:"effect_id"`
			To       string `json:"to"`
		}
		if e.Kind == "effect_transition" && json.Unmarshal(e.Body, &b) == nil && b.EffectID == effect {
			out = append(out, b.To)
		}
	}
	return out
}

// TestEnterCommitIsTwoTransactions: EnterCommit records commit_intent and
// committing as two transactions, the first committed (and visible to
// anyone) before the hook between them runs, with the same checks and
// ledger events as BeginCommit followed by Transition; a refused check
// records nothing and never reaches the second.
func TestEnterCommitIsTwoTransactions(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	eff := f.ready(t, s)
	var err error
	req := CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}

	// Refused: nothing recorded, the hook never runs.
	hooked := false
	_, err = s.EnterCommit(ctx, req, func(context.Context, CommitView) error { return protocol.E(protocol.CodeForbidden) },
		func(CommitView) { hooked = true })
	wantCode(t, err, protocol.CodeForbidden)
	if got, _ := s.Effect(ctx, eff.ID); got.State != Ready || hooked {
		t.Fatalf("refused commit: state %s, hook ran %v", got.State, hooked)
	}
	_, err = s.EnterCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 2}, allow, nil)
	wantCode(t, err, protocol.CodeStaleRequestEpoch)

	var between EffectState
	view, err := s.EnterCommit(ctx, req, allow, func(v CommitView) {
		if v.Effect.State != CommitIntent {
			t.Errorf("hook's view: %s", v.Effect.State)
		}
		// Another connection sees the first transaction committed and
		// the second not yet.
		got, err := s.Effect(ctx, eff.ID)
		if err != nil {
			t.Error(err)
		}
		between = got.State
	})
	if err != nil {
		t.Fatal(err)
	}
	if between != CommitIntent {
		t.Fatalf("between the two transactions the effect is %q, want commit_intent", between)
	}
	if view.Effect.State != Committing || view.Effect.CommitIntentAt == nil {
		t.Fatalf("after EnterCommit: %+v", view.Effect)
	}
	if got, _ := s.Effect(ctx, eff.ID); got.State != Committing {
		t.Fatalf("stored: %s", got.State)
	}
	tos := transitionsOf(t, s, f, eff.ID.String())
	if n := len(tos); n < 2 || tos[n-2] != string(CommitIntent) || tos[n-1] != string(Committing) {
		t.Fatalf("transitions %v", tos)
	}
	// Committing is past the horizon: entering again is illegal.
	_, err = s.EnterCommit(ctx, req, allow, nil)
	wantCode(t, err, protocol.CodeIllegalTransition)
	mustVerify(t, s, f.ep.ID)
}

// TestEnterCommitRedoesCommittingOnANewConnection: when the connection
// holding committing's pipelined locks dies before its writes are sent,
// committing is run again from the start on another connection (the dead
// transaction took nothing with it), exactly once in the ledger.
func TestEnterCommitRedoesCommittingOnANewConnection(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	eff := f.ready(t, s)
	admin := e.admin()
	view, err := s.EnterCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, allow, func(CommitView) {
		// The only backend idle in a transaction is the one holding
		// committing's locks.
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle in transaction' AND pid <> pg_backend_pid()`).Scan(&n); err != nil || n != 1 {
			t.Errorf("terminated %d backends: %v", n, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if view.Effect.State != Committing {
		t.Fatalf("after EnterCommit: %s", view.Effect.State)
	}
	tos := transitionsOf(t, s, f, eff.ID.String())
	committing := 0
	for _, to := range tos {
		if to == string(Committing) {
			committing++
		}
	}
	if committing != 1 {
		t.Fatalf("transitions %v", tos)
	}
	mustVerify(t, s, f.ep.ID)
	if _, err := s.FinishCommit(ctx, Outcome{EffectID: eff.ID, State: Committed, Receipt: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

// TestEvaluateInEpisode: the broker's evaluate in one transaction keeps the
// ownership check's answers — another episode's effect is not_found
// without its episode being locked or read, a stale request epoch is told
// first — and records nothing a plan refuses.
func TestEvaluateInEpisode(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	mine, other := e.episode(s), e.episode(s)
	propose := func(f fixture) Effect {
		eff, err := s.ProposeEffect(ctx, Proposal{EpisodeID: f.ep.ID, Epoch: 1, LeaseID: f.lease.ID, Kind: "git_commit", Class: 3,
			TargetID: "repo", Target: []byte(`{"ref":"refs/heads/main"}`), PayloadDigest: digest("patch"),
			Prepare: &Trajectory{Version: 1, Regime: "stable"}})
		if err != nil {
			t.Fatal(err)
		}
		return eff
	}
	ready := func(e Effect) (EvaluationPlan, error) {
		return EvaluationPlan{Evaluation: Evaluation{EffectID: e.ID, Revision: e.Revision, Epoch: 1, Ready: true}}, nil
	}
	foreign, own := propose(other), propose(mine)

	// Another episode's effect, with that episode's row locked by
	// someone else: answered at once, so nothing of it was locked.
	admin := e.admin()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM episodes WHERE id = $1 FOR UPDATE`, other.ep.ID); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = s.EvaluateInEpisode(quick, mine.ep.ID, foreign.ID, 1, ready)
	cancel()
	wantCode(t, err, protocol.CodeNotFound)
	_, err = s.EvaluateInEpisode(ctx, mine.ep.ID, foreign.ID, 2, ready)
	wantCode(t, err, protocol.CodeStaleRequestEpoch)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Effect(ctx, foreign.ID); got.State != Prepared {
		t.Fatalf("foreign effect is %s", got.State)
	}

	// A refusing plan, and a plan naming another effect, record nothing.
	_, err = s.EvaluateInEpisode(ctx, mine.ep.ID, own.ID, 1, func(Effect) (EvaluationPlan, error) {
		return EvaluationPlan{}, protocol.E(protocol.CodeForbidden)
	})
	wantCode(t, err, protocol.CodeForbidden)
	_, err = s.EvaluateInEpisode(ctx, mine.ep.ID, own.ID, 1, func(Effect) (EvaluationPlan, error) {
		return EvaluationPlan{Evaluation: Evaluation{EffectID: foreign.ID, Revision: 1, Epoch: 1, Ready: true}}, nil
	})
	wantCode(t, err, protocol.CodeInvalidField)
	if got, _ := s.Effect(ctx, own.ID); got.State != Prepared {
		t.Fatalf("refused plans moved the effect to %s", got.State)
	}

	// Then is the answer once the evaluation is recorded.
	denied := protocol.Errorf(protocol.CodeForbidden, "denied")
	got, err := s.EvaluateInEpisode(ctx, mine.ep.ID, own.ID, 1, func(e Effect) (EvaluationPlan, error) {
		return EvaluationPlan{Evaluation: Evaluation{EffectID: e.ID, Revision: e.Revision, Epoch: 1}, Then: denied}, nil
	})
	if err != denied || got.State != Evaluating {
		t.Fatalf("plan with Then: %s %v", got.State, err)
	}
	if got, err = s.EvaluateInEpisode(ctx, mine.ep.ID, own.ID, 1, ready); err != nil || got.State != Ready {
		t.Fatalf("ready: %s %v", got.State, err)
	}
	mustVerify(t, s, mine.ep.ID)
	mustVerify(t, s, other.ep.ID)
}

// TestEnterCommitInEpisode: EnterCommit with the ownership read in
// commit_intent's transaction keeps EffectInEpisode's answers in its order
// (the request's epoch, then the effect's episode) before plan runs,
// without waiting on another episode's rows; the lease, decisions and
// spend it reads are the effect's; a refusing plan records nothing;
// otherwise it is EnterCommit, hook and ledger alike.
func TestEnterCommitInEpisode(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f, other := e.episode(s), e.episode(s)
	eff := f.ready(t, s)
	var err error
	planned := 0
	plan := func(check CommitCheck) func(Effect) (CommitRequest, CommitCheck, error) {
		return func(got Effect) (CommitRequest, CommitCheck, error) {
			planned++
			return CommitRequest{EffectID: got.ID, Revision: got.Revision, Epoch: got.Epoch}, check, nil
		}
	}
	events := func() int {
		n := 0
		for _, ep := range []fixture{f, other} {
			es, err := s.Events(ctx, ep.ep.ID)
			if err != nil {
				t.Fatal(err)
			}
			n += len(es)
		}
		return n
	}
	before := events()
	_, err = s.EnterCommitInEpisode(ctx, other.ep.ID, eff.ID, 2, plan(allow), nil)
	wantCode(t, err, protocol.CodeStaleRequestEpoch)
	_, err = s.EnterCommitInEpisode(ctx, other.ep.ID, eff.ID, 1, plan(allow), nil)
	wantCode(t, err, protocol.CodeNotFound)
	_, err = s.EnterCommitInEpisode(ctx, f.ep.ID, eff.ID, 2, plan(allow), nil)
	wantCode(t, err, protocol.CodeStaleRequestEpoch)
	if planned != 0 {
		t.Fatalf("plan ran %d times for refused requests", planned)
	}
	hooked := false
	_, err = s.EnterCommitInEpisode(ctx, f.ep.ID, eff.ID, 1, func(Effect) (CommitRequest, CommitCheck, error) {
		return CommitRequest{}, nil, protocol.E(protocol.CodeForbidden)
	}, func(CommitView) { hooked = true })
	wantCode(t, err, protocol.CodeForbidden)
	if got, _ := s.Effect(ctx, eff.ID); got.State != Ready || hooked || events() != before {
		t.Fatalf("refused commit: state %s, hook ran %v, %d events", got.State, hooked, events()-before)
	}

	// Another episode's worker neither waits on nor locks the effect's
	// rows: with its effect and lease held FOR UPDATE elsewhere, the
	// answer is not_found at once.
	admin := e.admin()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM effects WHERE id = $1 FOR UPDATE`, eff.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM leases WHERE id = $1 FOR UPDATE`, f.lease.ID); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = s.EnterCommitInEpisode(quick, other.ep.ID, eff.ID, 1, plan(allow), nil)
	cancel()
	wantCode(t, err, protocol.CodeNotFound)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	var between EffectState
	view, err := s.EnterCommitInEpisode(ctx, f.ep.ID, eff.ID, 1, plan(func(_ context.Context, v CommitView) error {
		if v.Lease.ID != f.lease.ID || v.Effect.ID != eff.ID || v.Episode.ID != f.ep.ID {
			t.Errorf("view: lease %s, effect %s, episode %s", v.Lease.ID, v.Effect.ID, v.Episode.ID)
		}
		return nil
	}), func(v CommitView) { between = v.Effect.State })
	if err != nil {
		t.Fatal(err)
	}
	if between != CommitIntent || view.Effect.State != Committing || planned != 1 {
		t.Fatalf("between %s, after %s, planned %d", between, view.Effect.State, planned)
	}
	tos := transitionsOf(t, s, f, eff.ID.String())
	if n := len(tos); n < 2 || tos[n-2] != string(CommitIntent) || tos[n-1] != string(Committing) {
		t.Fatalf("transitions %v", tos)
	}
	mustVerify(t, s, f.ep.ID)
}
