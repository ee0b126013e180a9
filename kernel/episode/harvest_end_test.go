package episode_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// endFails is the rig's real store, except that EndEpisode fails as an
// unreachable database does (authority_unavailable) while fails > 0.
type endFails struct {
	store.Store
	fails atomic.Int64
	calls atomic.Int64
}

func (s *endFails) EndEpisode(ctx context.Context, req store.EndEpisode) (store.Episode, error) {
	s.calls.Add(1)
	if s.fails.Add(-1) >= 0 {
		return store.Episode{}, protocol.Errorf(protocol.CodeAuthorityUnavailable, "test: the database is unreachable")
	}
	return s.Store.EndEpisode(ctx, req)
}

// withEndFails puts f in front of the store of every boot while *on.
func withEndFails(f *endFails, on *atomic.Bool) rigOpt {
	return withConfig(func(c *episode.Config) {
		if on.Load() {
			f.Store = c.Store
			c.Store = f
		}
	})
}

const harvestFix = `sed -i 's/ + 1))/))/' src/calc.sh; sh tests/test_calc.sh`

// TestHarvestEndRetriedWhileStoreUnavailable: the harvest lands, and the
// store is unavailable for the first two attempts to record the end; the
// controller retries and the episode ends landed, in memory and in the
// store alike.
func TestHarvestEndRetriedWhileStoreUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := &endFails{}
	f.fails.Store(2)
	var on atomic.Bool
	on.Store(true)
	r := harvestRig(t, ctx, "harvest_end_retry", withEndFails(f, &on))
	e, err := r.k.Start(ctx, r.harvestSpec(harvestFix))
	if err != nil {
		t.Fatal(err)
	}
	o := r.ended(t, ctx, e, episode.OutcomeLanded)
	if n := f.calls.Load(); n != 3 {
		t.Fatalf("EndEpisode called %d times, want 3 (two unavailable, one that lands)", n)
	}
	if o.Commit != testbed.Git(t, r.repo, "rev-parse", "refs/heads/main") {
		t.Fatalf("outcome %+v", o)
	}
}

// TestHarvestLandedEndLostRestart: the harvest lands but the store never
// records the end (unavailable past every retry). The episode must not
// look final in memory while the store says active; the kernel then
// restarts (the crashed process's store handle closed, a new process of
// the same instance booted on the same database, as TestKernelRestartReconciles
// does) and the restart ends the episode with the landed outcome instead
// of resuming it: no new domain, the worker not run again, one commit on
// main.
func TestHarvestLandedEndLostRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := &endFails{}
	f.fails.Store(1 << 30)
	var on atomic.Bool
	on.Store(true)
	r := harvestRig(t, ctx, "harvest_end_lost", withEndFails(f, &on))
	e, err := r.k.Start(ctx, r.harvestSpec(harvestFix))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatalf("the episode's supervisor did not stop: %+v", e.Status())
	}
	s := e.Status()
	if s.State.Final() || s.Outcome != nil {
		t.Fatalf("final in memory though the store never recorded the end: %+v", s)
	}
	if n := f.calls.Load(); n < 2 {
		t.Fatalf("EndEpisode called %d times: not retried", n)
	}
	if rec, err := r.st.Episode(ctx, e.ID()); err != nil || rec.State != store.EpisodeActive {
		t.Fatalf("store: %+v, %v", rec.State, err)
	}
	head := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main")
	if head == r.base {
		t.Fatal("the harvest did not land")
	}

	// Restart: the old process is gone, a new one of the same instance
	// boots against the same database and launcher, with a store that
	// works.
	r.st.Close()
	on.Store(false)
	r.boot(t, ctx)
	rec, err := r.k.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v (%+v)", err, rec)
	}
	o, ok := rec.Ended[e.ID()]
	if !ok || len(rec.Resumed) != 0 || len(rec.Contained) != 0 || len(rec.Skipped) != 0 {
		t.Fatalf("recovery: %+v", rec)
	}
	if o.Kind != episode.OutcomeLanded || o.Commit != head || o.Ref != "refs/heads/main" || o.Effect == "" {
		t.Fatalf("outcome %+v, main at %s", o, head)
	}
	if got := r.dom.created(""); len(got) != 0 {
		t.Fatalf("the restart created domains (the worker ran again): %v", got)
	}
	if n := testbed.Git(t, r.repo, "rev-list", "--count", r.base+"..refs/heads/main"); n != "1" {
		t.Fatalf("%s commits on main, want the harvest's one", n)
	}
	st, err := r.st.Episode(ctx, e.ID())
	if err != nil || st.State != store.EpisodeCompleted {
		t.Fatalf("store: %+v, %v", st.State, err)
	}
	evs, err := r.st.Events(ctx, e.ID())
	if err != nil {
		t.Fatal(err)
	}
	ended := 0
	for _, ev := range evs {
		if ev.Kind != "episode_ended" {
			continue
		}
		ended++
		var body struct {
			Reason string `json:"reason"`
		}
		if err := jsonUnmarshal(ev.Body, &body); err != nil {
			t.Fatal(err)
		}
		if got, ok := episode.ParseOutcome(body.Reason); !ok || got.Kind != episode.OutcomeLanded || got.Commit != head || got.Effect != o.Effect {
			t.Fatalf("recorded reason %q", body.Reason)
		}
	}
	if ended != 1 {
		t.Fatalf("%d episode_ended events", ended)
	}
	if rep, err := r.st.VerifyLedger(ctx, e.ID()); err != nil {
		t.Fatalf("ledger: %+v, %v", rep, err)
	}
	if _, err := os.Stat(filepath.Join(shared.bed.Workspaces, e.ID().String())); !os.IsNotExist(err) {
		t.Errorf("the workspace outlived the episode: %v", err)
	}
	// A second start finds nothing to do.
	if rec, err := r.k.Recover(ctx); err != nil || len(rec.Resumed)+len(rec.Ended)+len(rec.Contained) != 0 {
		t.Fatalf("second recovery: %+v, %v", rec, err)
	}
}
