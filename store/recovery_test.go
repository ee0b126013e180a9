package store

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
)

// The repair path: checkpoints form a tree, a restore makes an older
// checkpoint current, and an effect prepared on a snapshot the episode no
// longer descends from cannot commit.
func TestSnapshotAncestryAndRepair(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	dom, gen, err := s.CreateDomain(ctx, NewDomain{EpisodeID: f.ep.ID, Epoch: 1})
	if err != nil || gen.Generation != 1 {
		t.Fatalf("domain: %+v %v", gen, err)
	}
	c1, err := s.RecordCheckpoint(ctx, NewCheckpoint{EpisodeID: f.ep.ID, DomainID: dom.ID, Generation: 1, Epoch: 1, Digest: digest("c1"), Stable: true})
	if err != nil || c1.ParentID != nil {
		t.Fatalf("c1: %+v %v", c1, err)
	}
	onC1, err := readyEffect(ctx, s, f.ep.ID, 1, f.lease.ID)
	if err != nil || *onC1.VersionVector.SnapshotAncestry != c1.ID {
		t.Fatalf("effect on c1: %+v %v", onC1.VersionVector, err)
	}
	c2, err := s.RecordCheckpoint(ctx, NewCheckpoint{EpisodeID: f.ep.ID, DomainID: dom.ID, Generation: 1, Epoch: 1, Digest: digest("c2")})
	if err != nil || c2.ParentID == nil || *c2.ParentID != c1.ID {
		t.Fatalf("c2: %+v %v", c2, err)
	}
	// c2 descends from c1: the effect prepared on c1 may commit.
	if _, err := s.BeginCommit(ctx, CommitRequest{EffectID: onC1.ID, Revision: 1, Epoch: 1}, allow); err != nil {
		t.Fatal(err)
	}
	onC2, err := readyEffect(ctx, s, f.ep.ID, 1, f.lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Restore c1 into a new generation: the live one must go first, and
	// only a stable checkpoint may be restored.
	_, err = s.NewGeneration(ctx, NewGeneration{DomainID: dom.ID, Epoch: 1, CheckpointID: &c1.ID})
	wantCode(t, err, protocol.CodeIllegalTransition)
	if _, err := s.DestroyGeneration(ctx, dom.ID, 1); err != nil {
		t.Fatal(err)
	}
	_, err = s.NewGeneration(ctx, NewGeneration{DomainID: dom.ID, Epoch: 1, CheckpointID: &c2.ID})
	wantCode(t, err, protocol.CodeInvalidField)
	g2, err := s.NewGeneration(ctx, NewGeneration{DomainID: dom.ID, Epoch: 1, CheckpointID: &c1.ID})
	if err != nil || g2.Generation != 2 {
		t.Fatalf("generation 2: %+v %v", g2, err)
	}
	// The episode's snapshot is c1 again, which does not descend from c2.
	_, err = s.BeginCommit(ctx, CommitRequest{EffectID: onC2.ID, Revision: 1, Epoch: 1}, allow)
	wantCode(t, err, protocol.CodeStaleAuthority)

	// The full repair: advance with lineage naming the checkpoint.
	adv, err := s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1, Reason: "repair", CheckpointID: &c1.ID})
	if err != nil {
		t.Fatal(err)
	}
	if adv.Lineage.CheckpointID == nil || *adv.Lineage.CheckpointID != c1.ID || len(adv.Unsettled) != 1 {
		t.Fatalf("repair advance: %+v", adv)
	}
	latest, err := s.LatestStableCheckpoint(ctx, f.ep.ID)
	if err != nil || latest.ID != c1.ID {
		t.Fatalf("latest stable: %+v %v", latest, err)
	}
	if _, err := s.MarkCheckpointStable(ctx, c2.ID); err != nil {
		t.Fatal(err)
	}
	if latest, _ := s.LatestStableCheckpoint(ctx, f.ep.ID); latest.ID != c2.ID {
		t.Fatalf("latest stable after marking c2: %s", latest.ID)
	}
	_, err = s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 2, CheckpointID: ptr(uuid.New())})
	wantCode(t, err, protocol.CodeNotFound)
	mustVerify(t, s, f.ep.ID)
}

// A revision supersedes the old one: decisions bound to revision 1 do not
// carry over, and a commit naming revision 1 is refused.
func TestRevisionSupersedesDecisions(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	eff := f.ready(t, s)
	var err error
	_, err = s.RecordDecision(ctx, NewDecision{EffectID: eff.ID, Revision: 1, Epoch: 1, Kind: DecisionHuman, Verdict: VerdictAllow})
	wantCode(t, err, protocol.CodeInvalidField) // unsigned human approval
	if _, err := s.RecordDecision(ctx, NewDecision{EffectID: eff.ID, Revision: 1, Epoch: 1, Kind: DecisionHuman,
		Verdict: VerdictAllow, KeyID: "operator", Signature: []byte("sig")}); err != nil {
		t.Fatal(err)
	}
	rev, err := s.ReviseEffect(ctx, Revision{EffectID: eff.ID, FromRevision: 1, Epoch: 1,
		Target: json.RawMessage(`{"ref":"refs/heads/main"}`), PayloadDigest: digest("patch v2")})
	if err != nil || rev.Revision != 2 || rev.State != Proposed || rev.VersionVector != nil {
		t.Fatalf("revise: %+v %v", rev, err)
	}
	_, err = s.RecordDecision(ctx, NewDecision{EffectID: eff.ID, Revision: 1, Epoch: 1, Kind: DecisionSemantic, Verdict: VerdictAllow})
	wantCode(t, err, protocol.CodeIllegalTransition) // proposed: not awaiting decisions
	for _, to := range []EffectState{Prepared, Evaluating, Ready} {
		if err := attempt(ctx, s, rev, 1, to); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, allow)
	wantCode(t, err, protocol.CodeStaleAuthority)
	view, err := s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 2, Epoch: 1}, func(_ context.Context, v CommitView) error {
		if len(v.Decisions) != 0 {
			t.Errorf("revision 1 decisions leaked into revision 2: %+v", v.Decisions)
		}
		return nil
	})
	if err != nil || view.Effect.VersionVector.EffectRevision != 2 {
		t.Fatalf("commit rev 2: %+v %v", view.Effect, err)
	}
	mustVerify(t, s, f.ep.ID)
}

func TestEndEpisode(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	open := driveTo(t, s, f, Ready)
	intent := driveTo(t, s, f, CommitIntent)
	ep, err := s.EndEpisode(ctx, EndEpisode{EpisodeID: f.ep.ID, Epoch: 1, State: EpisodeContained, Reason: "max repairs"})
	if err != nil || ep.State != EpisodeContained {
		t.Fatalf("end: %+v %v", ep, err)
	}
	if got, _ := s.Effect(ctx, open.ID); got.State != Aborted {
		t.Fatalf("open effect is %s after containment", got.State)
	}
	if l, _ := s.Lease(ctx, f.lease.ID); l.RevokedAt == nil {
		t.Fatal("lease survived containment")
	}
	_, err = s.GrantLease(ctx, LeaseGrant{EpisodeID: f.ep.ID, Epoch: 1, TTL: 60e9})
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1})
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = s.EndEpisode(ctx, EndEpisode{EpisodeID: f.ep.ID, Epoch: 1, State: EpisodeCompleted})
	wantCode(t, err, protocol.CodeIllegalTransition)
	// What crossed the horizon is still settled.
	if _, err := s.FinishCommit(ctx, Outcome{EffectID: intent.ID, State: Failed}); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, s, f.ep.ID)
}

func TestBadInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	before, _ := s.Episode(ctx, f.ep.ID)
	good := Proposal{EpisodeID: f.ep.ID, Epoch: 1, LeaseID: f.lease.ID, Kind: "git_commit", Class: 3, TargetID: "repo", PayloadDigest: digest("x")}
	for name, mut := range map[string]func(*Proposal){
		"kind":   func(p *Proposal) { p.Kind = "Git Commit" },
		"class":  func(p *Proposal) { p.Class = 1 },
		"digest": func(p *Proposal) { p.PayloadDigest = "md5:abc" },
		"target": func(p *Proposal) { p.Target = json.RawMessage(`{"a":1,"a":2}`) },
		"array":  func(p *Proposal) { p.Target = json.RawMessage(`[1]`) },
		"nul":    func(p *Proposal) { p.Target = json.RawMessage(`{"a":"\u0000"}`) },
		"tid":    func(p *Proposal) { p.TargetID = "" },
	} {
		p := good
		mut(&p)
		if _, err := s.ProposeEffect(ctx, p); code(err) != protocol.CodeInvalidField {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := s.ProposeEffect(ctx, Proposal{EpisodeID: f.ep.ID, Epoch: 1, LeaseID: uuid.New(), Kind: "git_commit", Class: 3, TargetID: "r", PayloadDigest: digest("x")})
	wantCode(t, err, protocol.CodeNotFound)
	_, err = s.Effect(ctx, uuid.New())
	wantCode(t, err, protocol.CodeNotFound)
	_, err = s.Transition(ctx, Transition{EffectID: uuid.New(), To: Aborted})
	wantCode(t, err, protocol.CodeNotFound)
	if after, _ := s.Episode(ctx, f.ep.ID); after.LedgerHead != before.LedgerHead {
		t.Fatal("refused input wrote the ledger")
	}
}

func ptr[T any](v T) *T { return &v }
