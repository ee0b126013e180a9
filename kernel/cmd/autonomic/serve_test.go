package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/server"
	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
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
	k := servertest.New(t, "cmd", nil)
	cluster, cfg, cfgPath := k.Cluster, k.Config, k.Path
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop, err := server.Start(ctx, cfg, hclog.NewNullLogger(), server.Hooks{})
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	defer stop()

	// An episode with an effect, made directly in the store.
	st, ep, eff := servertest.SeedEffect(t, ctx, cluster.KernelConnString("cmd"))
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
	// Only the kernel driving an episode may vouch for its work; this one
	// runs no controller at all (the episode was made in the store), so
	// complete is refused and changes nothing, while abort ends it.
	if out := run(1, "episode", "complete", id, "--reason", "looks done", "--config", cfgPath); !strings.Contains(out, "not available") {
		t.Fatalf("complete of an episode this kernel does not drive: %s", out)
	}
	if out := run(0, "episode", "status", id, "--config", cfgPath); !strings.Contains(out, "state        active") {
		t.Fatalf("a refused complete changed the episode: %s", out)
	}
	if out := run(0, "episode", "abort", id, "--reason", "test", "--config", cfgPath); !strings.Contains(out, "aborted") {
		t.Fatalf("episode abort: %s", out)
	}
	if out := run(1, "episode", "status", "nope", "--socket", filepath.Join(cfg.StateDir, "missing.sock")); !strings.Contains(out, "no kernel answers") {
		t.Fatalf("unreachable kernel: %s", out)
	}
}
