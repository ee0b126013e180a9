package episode_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestKernelRestartReconciles: an episode's worker has prepared an effect
// when the kernel crashes (its launcher monitor killed, its store and
// launcher connections gone, nothing cleaned up). A new controller on the
// same database and launcher reconciles, fences the epoch, destroys the
// crashed kernel's domain and proves it gone, and resumes the episode from
// its stable checkpoint into generation 2; the worker re-proposes and
// commits under epoch 2. No effect is lost or done twice and the ledger
// verifies.
func TestKernelRestartReconciles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newRig(t, ctx, "episode_restart")
	e, err := r.k.Start(ctx, r.spec(map[string]string{"PROBE": "hold"}))
	if err != nil {
		t.Fatal(err)
	}
	first := e.Status()
	// Wait for generation 1's effect to be prepared.
	var held uuid.UUID
	for held == uuid.Nil {
		if ctx.Err() != nil {
			t.Fatalf("generation 1 never prepared its effect: %+v", e.Status())
		}
		evs, err := r.st.Events(ctx, e.ID())
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			var b struct {
				EffectID uuid.UUID `json:"effect_id"`
			}
			if ev.Kind == "effect_proposed" && json.Unmarshal(ev.Body, &b) == nil {
				if eff, err := r.st.Effect(ctx, b.EffectID); err == nil && eff.State == store.Prepared {
					held = eff.ID
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Crash: the monitor dies, the old kernel loses launcher and store.
	old := r.dom.created(first.LauncherID)[first.LauncherID]
	if old == nil {
		t.Fatal("generation 1's domain is not known to the rig")
	}
	if err := syscall.Kill(old.MonitorPID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.dom.dead.Store(true)
	r.st.Close()
	select {
	case <-e.Done(): // the dead kernel's goroutines are gone too
	case <-ctx.Done():
		t.Fatal("the crashed controller did not stop")
	}
	if st, err := shared.bed.Domains().Inspect(ctx, first.LauncherID); err != nil || !st.Exists {
		t.Fatalf("the crash should leave generation 1's domain behind: %+v, %v", st, err)
	}

	// Restart.
	r.boot(t, ctx)
	rec, err := r.k.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v (%+v)", err, rec)
	}
	if len(rec.Resumed) != 1 || len(rec.Contained) != 0 || len(rec.Skipped) != 0 || !slices.Contains(rec.Destroyed, first.LauncherID) {
		t.Fatalf("recovery: %+v", rec)
	}
	if st, err := shared.bed.Domains().Inspect(ctx, first.LauncherID); err != nil || st.Exists || st.Populated || st.Processes != 0 {
		t.Fatalf("fenced generation 1 after restart: %+v, %v", st, err)
	}
	e2 := rec.Resumed[0]
	s := e2.Status()
	if e2.ID() != e.ID() || s.State != episode.Running || s.Epoch != 2 || s.Generation != 2 || s.LeaseID == first.LeaseID {
		t.Fatalf("resumed: %+v", s)
	}
	if eff, err := r.st.Effect(ctx, held); err != nil || eff.State != store.Stale {
		t.Fatalf("generation 1's effect after restart: %+v, %v", eff.State, err)
	}
	lin, err := r.st.Lineage(ctx, e.ID())
	if err != nil || len(lin) != 1 || lin[0].Reason != "kernel restart" || lin[0].CheckpointID == nil {
		t.Fatalf("lineage: %+v, %v", lin, err)
	}
	if !restoredFrom(t, ctx, r.st, e.ID(), *lin[0].CheckpointID) {
		t.Fatal("generation 2 was not restored from the fenced epoch's stable checkpoint")
	}

	x := nextExit(t, ctx, e2)
	out := string(x.Output)
	t.Logf("generation %d worker:\n%s", x.Generation, out)
	if x.Generation != 2 || x.Epoch != 2 || !strings.Contains(out, "STATE=committed") {
		t.Fatalf("resumed worker did not commit: %+v\n%s", x.Exited, out)
	}
	// Exactly one commit, the epoch 2 effect's; nothing left unsettled.
	if n := testbed.Git(t, r.repo, "rev-list", "--count", r.base+"..refs/heads/main"); n != "1" {
		t.Fatalf("%s commits on the authoritative main", n)
	}
	msg := headMessage(t, r.repo)
	i := strings.Index(msg, broker.TrailerKey+":")
	if i < 0 {
		t.Fatalf("no trailer:\n%s", msg)
	}
	id := uuid.MustParse(strings.TrimSpace(msg[i+len(broker.TrailerKey)+1:]))
	if got, err := r.st.Effect(ctx, id); err != nil || got.State != store.Committed || got.Epoch != 2 || id == held {
		t.Fatalf("committed effect: %+v, %v", got, err)
	}
	if u, err := r.st.Unsettled(ctx, e.ID()); err != nil || len(u) != 0 {
		t.Fatalf("unsettled after the commit: %+v, %v", u, err)
	}
	r.end(t, ctx, e2, episode.Completed, "resumed and committed")
	// Ended, it gives back what both kernels had stored for it, the first
	// one's checkpoints known to the second from the ledger alone.
	for _, id := range []string{first.LauncherID, first.LauncherID + "-base", s.LauncherID} {
		if holds, err := os.ReadDir(filepath.Join(shared.bed.State, "holds", id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still holds %d checkpoints after the episode ended (%v)", id, len(holds), err)
		}
	}
}
