package store

import (
	"encoding/json"
	"testing"
)

// TestLedgerRowsOfAnyCount: a mutation appends its events whatever their
// number — as rows of scalars up to maxEventRows, as arrays beyond — each
// once, in order, on the chain the episode's head names.
func TestLedgerRowsOfAnyCount(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	for k := range maxEventRows + 3 {
		eff, err := s.ProposeEffect(ctx, Proposal{EpisodeID: f.ep.ID, Epoch: 1, LeaseID: f.lease.ID, Kind: "git_commit", Class: 3,
			TargetID: "repo", Target: []byte(`{"ref":"refs/heads/main"}`), PayloadDigest: digest("patch")})
		if err != nil {
			t.Fatal(err)
		}
		if eff, err = s.PrepareEffect(ctx, Prepare{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1, TrajectoryVersion: 1, TrajectoryRegime: "stable"}); err != nil {
			t.Fatal(err)
		}
		// One evaluation recording k decisions: k events and the moves.
		ev := Evaluation{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1, Ready: true}
		for range k {
			ev.Decisions = append(ev.Decisions, NewDecision{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1,
				Kind: DecisionVerification, Verdict: VerdictAllow, Body: json.RawMessage(`{}`)})
		}
		before, err := s.Events(ctx, f.ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Evaluate(ctx, ev); err != nil {
			t.Fatal(err)
		}
		after, err := s.Events(ctx, f.ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		added := after[len(before):]
		decided := 0
		for i, e := range added {
			if e.Seq != before[len(before)-1].Seq+int64(i)+1 {
				t.Fatalf("k=%d: event %d has seq %d", k, i, e.Seq)
			}
			if e.Kind == "decision_recorded" {
				decided++
			}
		}
		if decided != k || len(added) <= k {
			t.Fatalf("k=%d: %d events appended, %d decisions", k, len(added), decided)
		}
		if k == maxEventRows+2 && len(added) <= maxEventRows {
			t.Fatalf("the arrays were never sent (%d events)", len(added))
		}
		mustVerify(t, s, f.ep.ID)
	}
}
