package episode_test

import (
	"context"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/store"
)

// TestDrainLetsEndedEpisodesGo: a kernel stopping right after an episode
// ended by itself (its end recorded, so its task reads ended) waits, in
// Drain, until the episode has given its checkpoint archives back to the
// launcher's store and the controller has let it go. Nothing drives an
// ended episode again, so a kernel that exited in between left its
// archives held for good (TestEvictedLayerLeavesEveryHost saw an evicted
// setup layer stay on its host so).
func TestDrainLetsEndedEpisodesGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := harvestRig(t, ctx, "drain")
	e, err := r.k.Start(ctx, r.harvestSpec(`true`))
	if err != nil {
		t.Fatal(err)
	}
	// Every release from now on takes two seconds: the ones the episode
	// makes while it runs are behind it once the store records its end.
	r.dom.releaseDelay.Store(int64(2 * time.Second))
	for {
		rec, err := r.st.Episode(ctx, e.ID())
		if err != nil {
			t.Fatal(err)
		}
		if rec.State == store.EpisodeCompleted || rec.State == store.EpisodeAborted || rec.State == store.EpisodeContained {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := r.dom.released.Load()
	if !r.k.Drain(ctx) {
		t.Fatal("Drain gave up")
	}
	if r.dom.released.Load() == before {
		t.Fatal("Drain returned before the ended episode released its checkpoints")
	}
	if _, ok := r.k.Episode(e.ID()); ok {
		t.Fatal("Drain returned while the controller still drives the ended episode")
	}
	<-e.Done()
	if o := e.Status().Outcome; o == nil {
		t.Fatalf("no outcome: %+v", e.Status())
	}
}
