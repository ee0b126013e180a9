package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
)

// TestEvictedLayerLeavesEveryHost: a setup layer made on host A and
// imported by host B is evicted by A (max_setup_layers 1, another key
// recorded); B, at its next setup, lets its hold on the evicted archive
// go, so the archive leaves B's launcher store too — not only A's, the one
// kernel that evicted the row — while the layer in use stays.
func TestEvictedLayerLeavesEveryHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r := newQueueRig(t, ctx)
	r.maxSetupLayers = 1
	// The setup leaves .deps/, which the repository ignores.
	r.repo, r.base = testbed.BareRepo(t, r.tmp, "layers.git", map[string]string{"test.sh": "echo PASS\n", ".gitignore": ".deps/\n"}, "base")
	db, err := pgx.Connect(ctx, r.cluster.AdminConnString("kernel"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)

	// run submits task n, whose setup writes what, on h and waits for it
	// to end, and returns the digest (hex) of the layer its episode used.
	run := func(h *host, n int, what string) string {
		t.Helper()
		spec, _ := json.Marshal(episode.Spec{OriginIntent: fmt.Sprintf("task %d", n), Repo: r.repo, BaseOID: r.base, Policy: r.policy,
			Envelope: r.grant, Argv: []string{"/bin/bash", "-c", fmt.Sprintf("cat .deps/v; echo %d > out-%d.txt", n, n)},
			LeaseTTL: time.Hour, MaxRepairs: 1,
			Setup:   &episode.SetupSpec{Argv: []string{"/bin/sh", "-c", "mkdir -p .deps && echo " + what + " > .deps/v"}},
			Harvest: &episode.HarvestSpec{TargetID: "repo", Ref: fmt.Sprintf("refs/heads/task/%d", n), Create: true}})
		tk, err := h.c.SubmitTask(ctx, api.TaskRequest{Project: "p0", MinClass: 3, Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		for {
			v, err := h.c.Task(ctx, tk.ID.String())
			if err != nil {
				t.Fatal(err)
			}
			if v.State.Done() {
				if v.State != "ended" || len(v.Episodes) != 1 {
					t.Fatalf("task %d: %s %s, episodes %v\n%s", n, v.State, v.Reason, v.Episodes, h.logs())
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("task %d never ended:\n%s", n, h.logs())
			}
			time.Sleep(200 * time.Millisecond)
		}
		var digest string
		if err := db.QueryRow(ctx, `SELECT digest FROM setup_layers WHERE inputs->'argv' @> to_jsonb($1::text)`,
			"mkdir -p .deps && echo "+what+" > .deps/v").Scan(&digest); err != nil {
			t.Fatalf("task %d: no layer recorded: %v", n, err)
		}
		return strings.TrimPrefix(digest, "sha256:")
	}
	stored := func(h *host, digest string) bool {
		_, err := os.Stat(filepath.Join(h.bed.State, "checkpoints", digest+".tar"))
		return err == nil
	}

	a := r.start(t, ctx, "host-a")
	one := run(a, 1, "one")
	a.stop()
	b := r.start(t, ctx, "host-b")
	if again := run(b, 2, "one"); again != one || !stored(b, one) {
		t.Fatalf("host B: layer %s (want %s), stored %v: it did not import the layer", again, one, stored(b, one))
	}
	b.stop()
	a = a.restart(t, ctx)
	two := run(a, 3, "two")
	if stored(a, one) {
		t.Errorf("host A evicted layer %s but still stores it", one)
	}
	a.stop()
	b = b.restart(t, ctx)
	if got := run(b, 4, "two"); got != two {
		t.Fatalf("host B used layer %s, want %s", got, two)
	}
	if stored(b, one) {
		t.Errorf("host B still stores layer %s, which host A evicted", one)
	}
	if !stored(b, two) {
		t.Errorf("host B does not store layer %s, the one in use", two)
	}
}
