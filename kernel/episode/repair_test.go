package episode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestViolationRepairEpoch2: the worker prepares its fix and then opens an
// AF_INET socket; the monitor's violation fences epoch 1, the domain is
// destroyed and proven empty, the pending effect is stale, the last stable
// checkpoint is restored into generation 2 under a narrower lease, and the
// worker of generation 2 re-proposes and commits under epoch 2.
func TestViolationRepairEpoch2(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newRig(t, ctx, "episode_violation")
	e, err := r.k.Start(ctx, r.spec(map[string]string{"PROBE": "violate"}))
	if err != nil {
		t.Fatal(err)
	}
	first := e.Status()
	x := nextExit(t, ctx, e)
	out := string(x.Output)
	t.Logf("generation %d worker:\n%s", x.Generation, out)
	if x.Generation != 2 || x.Epoch != 2 {
		t.Fatalf("first worker exit is generation %d epoch %d, want the repaired one", x.Generation, x.Epoch)
	}
	if x.Exited.ExitCode == nil || *x.Exited.ExitCode != 0 || !strings.Contains(out, "EPOCH=2") || !strings.Contains(out, "STATE=committed") {
		t.Fatalf("generation 2 did not commit: %+v\n%s", x.Exited, out)
	}
	s := e.Status()
	if s.State != episode.Running || s.Epoch != 2 || s.Generation != 2 || s.Repairs != 1 || s.LeaseID == first.LeaseID {
		t.Fatalf("after repair: %+v", s)
	}
	// Generation 1's domain is gone.
	if st, err := shared.bed.Domains().Inspect(ctx, first.LauncherID); err != nil || st.Exists || st.Populated {
		t.Fatalf("generation 1 after repair: %+v, %v", st, err)
	}
	// The epoch advance is in the lineage, names the restored checkpoint,
	// and staled generation 1's pending effect; its lease is revoked.
	lin, err := r.st.Lineage(ctx, e.ID())
	if err != nil || len(lin) != 1 || lin[0].FromEpoch != 1 || lin[0].ToEpoch != 2 || lin[0].CheckpointID == nil ||
		!strings.Contains(lin[0].Reason, "violation: socket") {
		t.Fatalf("lineage: %+v, %v", lin, err)
	}
	staled := stalled(t, ctx, r.st, e.ID())
	if len(staled) != 1 {
		t.Fatalf("staled effects %v, want generation 1's one", staled)
	}
	eff, err := r.st.Effect(ctx, staled[0])
	if err != nil || eff.State != store.Stale || eff.Epoch != 1 {
		t.Fatalf("generation 1's effect: %+v, %v", eff.State, err)
	}
	if l, err := r.st.Lease(ctx, first.LeaseID); err != nil || l.RevokedAt == nil {
		t.Fatalf("epoch 1 lease not revoked: %+v, %v", l, err)
	}
	// Generation 2 was restored from exactly that stable checkpoint.
	ck, err := r.st.LatestStableCheckpoint(ctx, e.ID())
	if err != nil {
		t.Fatal(err)
	}
	if !restoredFrom(t, ctx, r.st, e.ID(), *lin[0].CheckpointID) || ck.Generation < 1 {
		t.Fatalf("generation 2 does not name checkpoint %s", lin[0].CheckpointID)
	}
	// The repair lease is narrower: it forbids the test file the first
	// lease allowed, and is within the first.
	path := "test.sh"
	req := &authority.Request{Target: "repo", Kind: "git_commit", Class: authority.ClassAuthoritative, Path: path, Bytes: 10}
	if first.Lease.Check(req) != authority.Allowed || s.Lease.Check(req) == authority.Allowed {
		t.Fatalf("repair lease is not narrower: first %v, repair %v", first.Lease.Check(req), s.Lease.Check(req))
	}
	// The commit landed once, under epoch 2, with its trailer.
	msg := headMessage(t, r.repo)
	if !strings.Contains(msg, broker.TrailerKey+":") || testbed.Git(t, r.repo, "rev-parse", "refs/heads/main^") != r.base {
		t.Fatalf("authoritative history:\n%s", msg)
	}
	id := strings.TrimSpace(msg[strings.Index(msg, broker.TrailerKey+":")+len(broker.TrailerKey)+1:])
	if got, err := r.st.Effect(ctx, uuid.MustParse(id)); err != nil || got.State != store.Committed || got.Epoch != 2 {
		t.Fatalf("committed effect: %+v, %v", got, err)
	}
	r.end(t, ctx, e, episode.Completed, "repaired and committed")
}

// TestRepairNarrowingEnforcedOnTheProductionPath: after a violation, the
// repaired generation's lease is the controller's own intersection of the
// previous lease with the spec's repair narrowing (which forbids test.sh;
// the first lease allowed it): the repaired worker's change that also
// edits test.sh is refused by that lease at evaluate — a write to a
// forbidden path, which the slow loop reports as the kernel denial it is —
// so the episode, its one repair spent, ends contained, and nothing lands.
func TestRepairNarrowingEnforcedOnTheProductionPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The target allows every path: only the lease can refuse test.sh.
	r := newRig(t, ctx, "episode_repair_narrowing", withTargetPaths("**"))
	e, err := r.k.Start(ctx, r.spec(map[string]string{"PROBE": "violate-touch"}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatalf("the episode did not end: %+v", e.Status())
	}
	s := e.Status()
	if s.State != episode.Contained || s.Generation != 2 || s.Epoch != 2 || !strings.Contains(s.Why, "forbidden path write: test.sh") {
		t.Fatalf("want generation 2 contained for its write to test.sh: %s in generation %d epoch %d: %s", s.State, s.Generation, s.Epoch, s.Why)
	}
	if testbed.Git(t, r.repo, "rev-parse", "refs/heads/main") != r.base {
		t.Fatal("main moved")
	}
	if rep, err := r.st.VerifyLedger(ctx, e.ID()); err != nil {
		t.Fatalf("ledger: %+v, %v", rep, err)
	}
}

// TestViolationStormRepairsOnce: a worker that trips seccomp fifty times
// in a burst before its repair fences it is repaired once (max_repairs 1
// holds) — the frames raised in epoch 1 do not spend epoch 2's repair —
// and generation 2 commits under epoch 2.
func TestViolationStormRepairsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newRig(t, ctx, "episode_violation_storm")
	e, err := r.k.Start(ctx, r.spec(map[string]string{"PROBE": "storm"}))
	if err != nil {
		t.Fatal(err)
	}
	x := nextExit(t, ctx, e)
	if s := e.Status(); x.Generation != 2 || x.Epoch != 2 || !strings.Contains(string(x.Output), "STATE=committed") ||
		s.State != episode.Running || s.Repairs != 1 {
		t.Fatalf("after the storm: exit generation %d epoch %d, status %+v\n%s", x.Generation, x.Epoch, s, x.Output)
	}
	if lin, err := r.st.Lineage(ctx, e.ID()); err != nil || len(lin) != 1 {
		t.Fatalf("lineage: %+v, %v (want exactly one repair)", lin, err)
	}
	// A storm is many violations: one alone would make "repairs once"
	// trivially true. The launcher reported each to generation 1's domain.
	id := fmt.Sprintf("%s-g1", e.ID())
	g1 := r.dom.created(id)[id]
	if g1 == nil {
		t.Fatalf("generation 1's domain %s was not created through the rig", id)
	}
	if v := g1.Violations(); len(v) < 2 {
		t.Fatalf("generation 1 reported %d violation(s), want a storm (more than one): %+v", len(v), v)
	} else {
		t.Logf("storm: generation 1 reported %d violations, repaired once", len(v))
	}
	if err := e.End(ctx, episode.Completed, "repaired once and committed"); err != nil {
		t.Fatal(err)
	}
}

// stalled reads the epoch advance's staled effects from the ledger.
func stalled(t *testing.T, ctx context.Context, st store.Store, ep uuid.UUID) []uuid.UUID {
	t.Helper()
	evs, err := st.Events(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Kind == "epoch_advanced" {
			var b struct {
				Staled []uuid.UUID `json:"staled_effects"`
			}
			if err := json.Unmarshal(ev.Body, &b); err != nil {
				t.Fatal(err)
			}
			return b.Staled
		}
	}
	return nil
}

func restoredFrom(t *testing.T, ctx context.Context, st store.Store, ep, ckpt uuid.UUID) bool {
	t.Helper()
	evs, err := st.Events(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Kind == "generation_started" {
			var b struct {
				Generation int        `json:"generation"`
				Checkpoint *uuid.UUID `json:"checkpoint_id"`
			}
			if json.Unmarshal(ev.Body, &b) == nil && b.Generation == 2 && b.Checkpoint != nil && *b.Checkpoint == ckpt {
				return true
			}
		}
	}
	return false
}

// TestRepairRestoresThePristineBase: what a worker writes in its first
// milliseconds is not in the stable checkpoint a repair restores. The
// worker plants a file at once and trips seccomp; generation 2 must start
// from the base OID's tree (generation 1 itself started restored from a
// checkpoint of a domain in which no worker code ran).
func TestRepairRestoresThePristineBase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newRig(t, ctx, "episode_pristine_base")
	spec := r.spec(nil)
	spec.Argv = []string{"/bin/bash", "-c", `
if [ "$AUTONOMIC_EPOCH" = 1 ]; then
  echo planted > /workspace/PLANTED
  ` + testbed.ProbePath + ` socket-inet
  sleep 120
fi
if [ -e /workspace/PLANTED ]; then echo SAW-PLANTED; else echo CLEAN; fi`}
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	x := nextExit(t, ctx, e)
	if x.Generation != 2 || !strings.Contains(string(x.Output), "CLEAN") {
		t.Fatalf("generation %d after repair:\n%s", x.Generation, x.Output)
	}
	ck, err := r.st.LatestStableCheckpoint(ctx, e.ID())
	if err != nil || ck.Generation != 1 {
		t.Fatalf("stable checkpoint %+v, %v", ck, err)
	}
	// The base domain is gone too.
	if st, err := shared.bed.Domains().Inspect(ctx, e.ID().String()+"-g1-base"); err != nil || st.Exists {
		t.Fatalf("base domain after start: %+v, %v", st, err)
	}
	if err := e.End(ctx, episode.Completed, "repaired from the base"); err != nil {
		t.Fatal(err)
	}
}

// TestViolationDestinationInTheLedger: under the agent profile (which
// lets a socket be made and refuses where it goes), a worker's connect to
// 1.1.1.1:443 is a violation whose destination — sent by the launcher in
// the violation frame — is kept in the episode's ledger (the repair's
// lineage and its events), so an operator sees where the worker tried to
// go.
func TestViolationDestinationInTheLedger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	agent := agentProfile(t)
	r := newRig(t, ctx, "episode_violation_dest", withConfig(func(c *episode.Config) {
		c.Profiles = map[string][]byte{episode.ProfileAgent: agent}
	}))
	spec := r.spec(map[string]string{"PROBE": "connect"})
	spec.Seccomp = episode.ProfileAgent
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	x := nextExit(t, ctx, e)
	if x.Generation != 2 {
		t.Fatalf("first worker exit is generation %d, want the repaired one:\n%s", x.Generation, x.Output)
	}
	lin, err := r.st.Lineage(ctx, e.ID())
	if err != nil || len(lin) != 1 || !strings.Contains(lin[0].Reason, "connect to 1.1.1.1:443") {
		t.Fatalf("lineage: %+v, %v", lin, err)
	}
	evs, err := r.st.Events(ctx, e.ID())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		found = found || strings.Contains(string(ev.Body), "1.1.1.1:443")
	}
	if !found {
		t.Fatal("no ledger event names the destination")
	}
	r.end(t, ctx, e, episode.Completed, "repaired")
}
