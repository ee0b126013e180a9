package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

func TestServeRefusesABadConfigNamingTheKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(p, []byte(`{"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules"},"effect_concurrency":0,"max_repairs":-2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := serveCmd([]string{"--config", p}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "max_repairs: must be 0..100") {
		t.Fatalf("serve with a bad config: %d %q", code, errb.String())
	}
}

// TestServeAndOperatorCommands runs serve against a real cluster and the
// operator commands against its socket.
func TestServeAndOperatorCommands(t *testing.T) {
	cluster := storetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateDatabase(ctx, "cmd"); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	doc, _ := json.Marshal(map[string]any{
		"state_dir": state,
		"store":     map[string]any{"url": cluster.KernelConnString("cmd"), "admin_url": cluster.AdminConnString("cmd")},
		"domain":    map[string]any{"backend": "unsafe_local"},
		"sensor":    map[string]any{"kind": "rules"},
	})
	cfgPath := filepath.Join(t.TempDir(), "autonomic.json")
	if err := os.WriteFile(cfgPath, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- serve(sctx, cfg, hclog.NewNullLogger(), serveHooks{ready: func() { close(ready) }}) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	defer func() { stop(); <-done }()

	// An episode with an effect, made directly in the store.
	st, err := store.Open(ctx, store.Config{URL: cluster.KernelConnString("cmd"), InstanceID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ep, err := st.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"origin_intent":"x"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := st.GrantLease(ctx, store.LeaseGrant{EpisodeID: ep.ID, Epoch: 1, Capabilities: []byte(`{}`), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	eff, err := st.ProposeEffect(ctx, store.Proposal{EpisodeID: ep.ID, Epoch: 1, LeaseID: lease.ID, Kind: "git_commit", Class: 3,
		TargetID: "repo", Target: []byte(`{}`), PayloadDigest: "sha256:" + strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	// Released, so the kernel (another instance) may end it.
	if err := st.ReleaseOwnership(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}

	run := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		var code int
		switch args[0] {
		case "episode":
			code = episodeCmd(args[1:], &out, &errb)
		case "effect":
			code = effectCmd(args[1:], &out, &errb)
		case "events":
			code = eventsCmd(args[1:], &out, &errb)
		}
		if code != want {
			t.Fatalf("%v: exit %d (want %d): %s %s", args, code, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	id := ep.ID.String()
	var list []api.EpisodeView
	if err := json.Unmarshal([]byte(run(0, "episode", "list", "--config", cfgPath, "--json")), &list); err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("episode list --json: %v %+v", err, list)
	}
	if out := run(0, "episode", "list", "--config", cfgPath); !strings.Contains(out, id) || !strings.Contains(out, "EPISODE") {
		t.Fatalf("episode list: %s", out)
	}
	if out := run(0, "episode", "status", id, "--config", cfgPath); !strings.Contains(out, "state        active") {
		t.Fatalf("episode status: %s", out)
	}
	if out := run(0, "effect", "list", id, "--config", cfgPath); !strings.Contains(out, eff.ID.String()) {
		t.Fatalf("effect list: %s", out)
	}
	var ev api.EffectView
	if err := json.Unmarshal([]byte(run(0, "effect", "show", eff.ID.String(), "--config", cfgPath, "--json")), &ev); err != nil || ev.State != "proposed" {
		t.Fatalf("effect show: %v %+v", err, ev)
	}
	if out := run(0, "events", "tail", id, "-n", "2", "--config", cfgPath); strings.Count(out, "\n") != 2 {
		t.Fatalf("events tail -n 2: %q", out)
	}
	if out := run(0, "events", "verify", id, "--config", cfgPath); !strings.Contains(out, "VERIFIES") {
		t.Fatalf("events verify: %s", out)
	}
	spec := filepath.Join(t.TempDir(), "spec.json")
	os.WriteFile(spec, []byte(`{"origin_intent":"x"}`), 0o600)
	if out := run(1, "episode", "start", "--spec", spec, "--config", cfgPath); !strings.Contains(out, "not available") {
		t.Fatalf("episode start without a controller: %s", out)
	}
	if out := run(0, "episode", "abort", id, "--reason", "test", "--config", cfgPath); !strings.Contains(out, "aborted") {
		t.Fatalf("episode abort: %s", out)
	}
	if out := run(1, "episode", "status", "nope", "--socket", filepath.Join(state, "missing.sock")); !strings.Contains(out, "no kernel answers") {
		t.Fatalf("unreachable kernel: %s", out)
	}
}

// TestSpeculationWindowExpiresEffects composes the broker from a
// configuration with speculation_ms and shows the window is its EffectTTL:
// an effect committed inside it meets the commit checks proper (here the
// regime: no controller drives the episode), one committed after it is
// refused as expired before any of them.
func TestSpeculationWindowExpiresEffects(t *testing.T) {
	cluster := storetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateDatabase(ctx, "spec"); err != nil {
		t.Fatal(err)
	}
	const window = 400 * time.Millisecond
	doc, _ := json.Marshal(map[string]any{
		"state_dir":      t.TempDir(),
		"store":          map[string]any{"url": cluster.KernelConnString("spec"), "admin_url": cluster.AdminConnString("spec")},
		"domain":         map[string]any{"backend": "unsafe_local"},
		"sensor":         map[string]any{"kind": "rules"},
		"targets":        map[string]any{"artifact": map[string]any{"reports": map[string]any{"dir": t.TempDir(), "class": 2}}},
		"speculation_ms": window.Milliseconds(),
	})
	cfgPath := filepath.Join(t.TempDir(), "autonomic.json")
	if err := os.WriteFile(cfgPath, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, store.Config{URL: cluster.KernelConnString("spec"), AdminURL: cluster.AdminConnString("spec"), InstanceID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k, err := compose(cfg, st, hclog.NewNullLogger(), serveHooks{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.broker.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	ep, err := st.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"origin_intent":"x"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := st.GrantLease(ctx, store.LeaseGrant{EpisodeID: ep.ID, Epoch: 1,
		Capabilities: []byte(`{"effects":[{"kind":"artifact","target_id":"reports","max_class":4}]}`), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ready := func(name string) store.Effect {
		t.Helper()
		target, _ := json.Marshal(map[string]string{"name": name})
		e, err := k.broker.Prepare(ctx, ep.ID, &protocol.WorkerRequest{Action: protocol.WorkerPrepare, Epoch: 1, LeaseID: lease.ID.String(),
			Kind: "artifact", TargetID: "reports", Target: target, PayloadB64: base64.StdEncoding.EncodeToString([]byte(name))})
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		if e.ExpiresAt == nil || e.ExpiresAt.Sub(e.CreatedAt) != window {
			t.Fatalf("effect expiry %v after %v, want the %v window", e.ExpiresAt, e.CreatedAt, window)
		}
		if e, err = k.broker.Evaluate(ctx, e, e.Revision, 1, nil); err != nil {
			t.Fatalf("evaluate: %v", err)
		}
		return e
	}
	fresh := ready("fresh")
	if _, err := k.broker.Commit(ctx, fresh, fresh.Revision, 1); err == nil || !strings.Contains(err.Error(), "regime") {
		t.Fatalf("commit inside the window: %v, want the regime's refusal", err)
	}
	old := ready("old")
	time.Sleep(window + 100*time.Millisecond)
	_, err = k.broker.Commit(ctx, old, old.Revision, 1)
	if protocol.AsWire(err).Code != protocol.CodeStaleAuthority || !strings.Contains(err.Error(), "effect expired") {
		t.Fatalf("commit after the window: %v, want stale_authority: effect expired", err)
	}
}
