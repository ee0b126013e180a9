package episode_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestEpisodeLifecycle: an episode starts at epoch 1 with a lease within its
// envelope; its worker fixes the failing test in /workspace, proposes the
// exact diff, evaluate makes it ready and the commit lands on the
// authoritative repository with its trailer; a post-commit checkpoint is
// recorded; completing destroys the domain.
func TestEpisodeLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newRig(t, ctx, "episode_lifecycle")
	e, err := r.k.Start(ctx, r.spec(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := e.Status()
	if s.State != episode.Running || s.Epoch != 1 || s.Generation != 1 {
		t.Fatalf("after start: %+v", s)
	}
	if s.Lease.MaxClass() != authority.ClassAuthoritative {
		t.Errorf("lease class %d", s.Lease.MaxClass())
	}
	// The workspace is the base, owned by the kernel's account.
	fi, err := os.Stat(filepath.Join(shared.bed.Workspaces, e.ID().String(), "calc.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != shared.bed.OwnerUID {
		t.Errorf("workspace file owned by %d, want the kernel's account %d", st.Uid, shared.bed.OwnerUID)
	}
	// Generation 1 starts from the base, where the test fails.
	landedFix(t, ctx, r.st, r.repo, r.base, e, nextExit(t, ctx, e))
	// The post-commit checkpoint arrives asynchronously.
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := 0
		evs, err := r.st.Events(ctx, e.ID())
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Kind == "checkpoint_recorded" {
				n++
			}
		}
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d checkpoints recorded, want the initial and a post-commit one", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	launcherID := e.Status().LauncherID
	// The post-commit checkpoint supersedes the base's: the base's
	// archive goes back at once, not at the episode's end.
	for {
		if _, err := os.Stat(filepath.Join(shared.bed.State, "holds", launcherID+"-base")); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the base checkpoint is still held after a later stable checkpoint", launcherID)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := e.End(ctx, episode.Completed, "worker committed the fix"); err != nil {
		t.Fatal(err)
	}
	if st, err := shared.bed.Domains().Inspect(ctx, launcherID); err != nil || st.Exists {
		t.Fatalf("domain after completion: %+v, %v", st, err)
	}
	// Ended in the store, the episode gives back every checkpoint it took
	// (the base's and its generation's): no launcher domain of it holds one.
	for _, id := range []string{launcherID, launcherID + "-base"} {
		if holds, err := os.ReadDir(filepath.Join(shared.bed.State, "holds", id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still holds %d checkpoints after the episode ended (%v)", id, len(holds), err)
		}
	}
	rec, err := r.st.Episode(ctx, e.ID())
	if err != nil || rec.State != store.EpisodeCompleted {
		t.Fatalf("episode record: %+v, %v", rec.State, err)
	}
	if rep, err := r.st.VerifyLedger(ctx, e.ID()); err != nil {
		t.Fatalf("ledger: %+v, %v", rep, err)
	}
	var doc map[string]any
	l, err := r.st.Lease(ctx, s.LeaseID)
	if err != nil || json.Unmarshal(l.Capabilities, &doc) != nil || doc["effects"] == nil {
		t.Fatalf("lease document: %s, %v", l.Capabilities, err)
	}
}
