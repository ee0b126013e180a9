package episode_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/store"
)

func waitDone(t *testing.T, ctx context.Context, e *episode.Episode) {
	t.Helper()
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatalf("supervisor still running: %+v", e.Status())
	}
}

// TestDeadAuthorityDestroysTheDomain: the episode ends in the store behind
// the controller's back (its authority is gone); the authority child fails
// and the domain is destroyed before the supervisor reports, so no worker
// runs on.
func TestDeadAuthorityDestroysTheDomain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := newRig(t, ctx, "episode_dead_authority")
	spec := r.spec(nil)
	spec.Argv = []string{"/bin/sleep", "300"}
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	s := e.Status()
	if st, err := shared.bed.Domains().Inspect(ctx, s.LauncherID); err != nil || !st.Populated {
		t.Fatalf("domain not running: %+v, %v", st, err)
	}
	if _, err := r.st.EndEpisode(ctx, store.EndEpisode{EpisodeID: e.ID(), Epoch: s.Epoch, State: store.EpisodeAborted, Reason: "operator pulled authority"}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, e)
	if x := e.Exit(); x == nil || x.Child != "authority" {
		t.Fatalf("supervisor exit %+v, want the authority child", x)
	}
	if st, err := shared.bed.Domains().Inspect(ctx, s.LauncherID); err != nil || st.Exists {
		t.Fatalf("domain survived its authority: %+v, %v", st, err)
	}
	if got := e.Status().State; got != episode.Suspended {
		t.Fatalf("state %s, want suspended", got)
	}
}

// TestMaxRepairsContains: with max_repairs 0 a violation contains the
// episode for good, the store says why, and the controller forgets it.
func TestMaxRepairsContains(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := newRig(t, ctx, "episode_max_repairs")
	spec := r.spec(nil)
	spec.MaxRepairs = 0
	spec.Argv = []string{"/bin/bash", "-c", testbed.ProbePath + " socket-inet; sleep 300"}
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	s := e.Status()
	waitDone(t, ctx, e)
	got := e.Status()
	if got.State != episode.Contained || !strings.Contains(got.Why, "max_repairs") {
		t.Fatalf("status %+v, want final containment", got)
	}
	rec, err := r.st.Episode(ctx, e.ID())
	if err != nil || rec.State != store.EpisodeContained {
		t.Fatalf("store: %s, %v", rec.State, err)
	}
	if st, err := shared.bed.Domains().Inspect(ctx, s.LauncherID); err != nil || st.Exists {
		t.Fatalf("domain after containment: %+v, %v", st, err)
	}
	if err := e.End(ctx, episode.Completed, "too late"); err == nil {
		t.Fatal("a contained episode completed")
	}
	// The controller drives it no more: `autonomic run` following it sees
	// it ended (it waited forever before).
	if _, ok := r.k.Episode(e.ID()); ok {
		t.Error("the controller still drives a contained episode")
	}
}
