package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/server"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// TestServeDBOutageBlocksAuthority is db_outage_blocks_authority at kernel
// level: the composed kernel (serve, in-process, with a real launcher and
// its own real postmaster) has a worker's class 3 commit in flight — its
// commit intent durable — when the postmaster is taken down: once by a
// fast shutdown, once by SIGKILL of it and its backends. While the
// database is gone autonomy drops to observe and nothing reaches the
// authoritative repository; once it returns the kernel climbs back to act
// without a restart, the interrupted effect is not committed, the
// episode's ledger verifies, and a new episode commits again.
func TestServeDBOutageBlocksAuthority(t *testing.T) {
	privileged.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bed, err := testbed.New(ctx, testbed.Options{Spec: "rootfs-builder/specs/worker.json", EffectClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			bed.RemoveCgroups()
			return
		}
		_ = bed.Close()
	}()
	tmp, err := os.MkdirTemp("", "autonomic-outage-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	// Its own cluster: this test stops and kills it.
	pg := filepath.Join(tmp, "pg")
	if err := os.Mkdir(pg, 0o755); err != nil {
		t.Fatal(err)
	}
	cluster, err := storetest.StartCluster(pg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cluster.Stop(context.Background()) }()
	if err := cluster.CreateDatabase(ctx, "kernel"); err != nil {
		t.Fatal(err)
	}
	repo, _ := testbed.BareRepo(t, tmp, "authoritative.git", map[string]string{"test.sh": "echo PASS\n", "greeting.txt": "hi\n"}, "base")
	rel, err := filepath.Rel(testbed.CgroupV2Mount(), bed.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(map[string]any{
		"policy_keys": map[string]string{"ops-1": base64.StdEncoding.EncodeToString(pub)},
		"state_dir":   filepath.Join(tmp, "state"),
		"store":       map[string]any{"url": cluster.KernelConnString("kernel"), "admin_url": cluster.AdminConnString("kernel")},
		"domain": map[string]any{"backend": "linux", "launcher_path": bed.Launcher, "direct": true,
			"workspaces_root": bed.Workspaces, "sockets_root": bed.Sockets, "cgroup_parent": "/" + rel},
		"sensor": map[string]any{"kind": "rules"},
		"targets": map[string]any{"git_commit": map[string]any{"repo": map[string]any{"repo": repo, "allowed_refs": []string{"refs/heads/main"},
			"allowed_paths": []string{"**"}, "verify_argv": []string{"sh", "test.sh"}}}},
		"automatic_verification": true,
		"max_repairs":            1,
		"regulator":              map[string]any{"start_level": "observe", "recover_after": 1, "recover_for_ms": 0, "health_interval_ms": 250},
	})
	cfg, err := config.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	// The fault: the first commit to reach the armed point (its intent
	// durable, committing not yet recorded) takes the database down there.
	var down atomic.Pointer[func(store.Effect)]
	hooks := &broker.Hooks{AfterIntent: func(e store.Effect) {
		if f := down.Swap(nil); f != nil {
			(*f)(e)
		}
	}}
	logs := &lockedBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Name: "autonomic", Output: logs, JSONFormat: true, Level: hclog.Info})
	stop, err := server.Start(ctx, cfg, log, server.Hooks{Owner: &[2]int{bed.OwnerUID, bed.OwnerGID}, Broker: hooks})
	if err != nil {
		t.Fatalf("serve: %v\n%s", err, logs)
	}
	defer func() {
		_ = stop()
		if t.Failed() {
			t.Logf("kernel log:\n%s", logs)
		}
	}()
	client := api.NewClient(cfg.APISocket())
	autonomy := func(want string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			kv, err := client.Kernel(ctx)
			if err == nil && kv.Autonomy == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("autonomy never reached %s: %+v, %v", want, kv, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	autonomy("act", 30*time.Second)

	grant := authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}},
		Allow: []string{"**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
	signed, err := policy.Sign(key, "ops-1", policy.Document{Schema: policy.Schema, ID: "outage", Version: 1, Capability: grant,
		Semantic: policy.Semantic{MaxRisk: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	start := func(base string) string {
		t.Helper()
		spec, _ := json.Marshal(episode.Spec{OriginIntent: "greet in greeting.txt", Repo: repo, BaseOID: base, Policy: signed, Envelope: grant,
			Argv: []string{"/bin/bash", "-c", commitWorker + "sleep 600\n"}, LeaseTTL: time.Hour})
		var m map[string]any
		_ = json.Unmarshal(spec, &m)
		delete(m, "max_repairs") // the kernel's applies
		spec, _ = json.Marshal(m)
		v, err := client.Start(ctx, spec)
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		return v.ID
	}

	for _, mode := range []string{"fast shutdown", "kill -9"} {
		t.Run(mode, func(t *testing.T) {
			head := testbed.Git(t, repo, "rev-parse", "refs/heads/main")
			intent := make(chan store.Effect, 1)
			f := func(e store.Effect) {
				if mode == "kill -9" {
					if err := cluster.Kill(); err != nil {
						t.Errorf("kill: %v", err)
					}
				} else if err := cluster.Stop(context.Background()); err != nil {
					t.Errorf("stop: %v", err)
				}
				intent <- e
			}
			down.Store(&f)
			id := start(head)
			var eff store.Effect
			select {
			case eff = <-intent:
			case <-time.After(2 * time.Minute):
				down.Store(nil)
				effs, err := client.Effects(ctx, id)
				ep, eerr := client.Episode(ctx, id)
				t.Fatalf("no commit reached its intent: effects %+v (%v); episode %+v (%v)", effs, err, ep, eerr)
			}
			t.Logf("%s with effect %s's commit intent durable", mode, eff.ID)
			autonomy("observe", 10*time.Second)
			// Down for a while: nothing reaches the repository.
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				if got := testbed.Git(t, repo, "rev-parse", "refs/heads/main"); got != head {
					t.Fatalf("the repository moved to %s while the database was down", got)
				}
			}
			if kv, err := client.Kernel(ctx); err != nil || kv.Autonomy != "observe" || kv.MaxClass > 1 {
				t.Fatalf("while down: %+v, %v", kv, err)
			}
			if err := cluster.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			autonomy("act", 30*time.Second)
			if got := testbed.Git(t, repo, "rev-parse", "refs/heads/main"); got != head {
				t.Fatalf("the interrupted commit landed after the outage: main at %s", got)
			}
			ev, err := client.Effect(ctx, eff.ID.String())
			if err != nil || ev.State == string(store.Committed) {
				t.Fatalf("the interrupted effect: %+v, %v", ev, err)
			}
			v, err := client.Verify(ctx, id)
			if err != nil || !v.OK || v.Entries == 0 {
				t.Fatalf("ledger after the outage: %+v, %v", v, err)
			}
			t.Logf("after the outage: effect %s, ledger verifies (%d entries)", ev.State, v.Entries)
			if _, err := client.Abort(ctx, id, "outage test done"); err != nil {
				t.Logf("abort: %v", err)
			}
		})
	}

	// Recovered: a new episode's class 3 commit lands, and its ledger
	// verifies.
	head := testbed.Git(t, repo, "rev-parse", "refs/heads/main")
	id := start(head)
	for testbed.Git(t, repo, "rev-parse", "refs/heads/main") == head {
		if ctx.Err() != nil {
			effs, _ := client.Effects(ctx, id)
			t.Fatalf("no commit after the database returned: %+v", effs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, err := client.Verify(ctx, id); err != nil || !v.OK {
		t.Fatalf("ledger of the episode after recovery: %+v, %v", v, err)
	}
	if _, err := client.Abort(ctx, id, "outage test done"); err != nil {
		t.Fatal(err)
	}
}
