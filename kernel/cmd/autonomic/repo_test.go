package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/targets"
)

// TestRepoAddWithoutRestart: a kernel configured with no git_commit target
// and no policy key at all takes a key from `autonomic key add` and a
// target from `autonomic repo add` while it runs — its test
// command detected from the repository — and an episode's harvest lands
// on a new branch of it, verified by those tests, with no configuration
// edit and no restart; after a restart the target and the key are still
// served (read back from state_dir) and a second change lands.
func TestRepoAddWithoutRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	k := bootKernel(t, ctx, map[string]any{
		"policy_keys":            map[string]string{},
		"sensor":                 map[string]any{"kind": "rules"},
		"automatic_verification": true,
		"regulator":              map[string]any{"start_level": "act"},
	})
	cfgPath, cfg, logs := k.cfgPath, k.cfg, k.logs
	repo, base := testbed.BareRepo(t, k.tmp, "shop.git", map[string]string{"Makefile": "test:\n\tsh test.sh\n", "test.sh": "grep -q fixed app.txt\n", "app.txt": "broken\n"}, "base")
	var out, errb bytes.Buffer
	// No policy key in the configuration: one is registered with the
	// running kernel (as root here; the kernel's account may too).
	if code := keyCmd([]string{"add", "ops", base64.StdEncoding.EncodeToString(pub), "--config", cfgPath}, &out, &errb); code != 0 {
		t.Fatalf("key add: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := repoCmd([]string{"add", repo, "--config", cfgPath}, &out, &errb); code != 0 {
		t.Fatalf("repo add: exit %d\n%s%s", code, out.String(), errb.String())
	}
	t.Logf("repo add:\n%s", out.String())
	if !strings.Contains(out.String(), "tests: make test (Makefile has a test target)") {
		t.Fatalf("repo add did not say which test command it chose:\n%s", out.String())
	}
	c := api.NewClient(cfg.APISocket())
	land := func(ref string) {
		t.Helper()
		grant := authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "shop", Kind: "git_commit", MaxClass: 3, Refs: []string{ref}}},
			Allow: []string{"**"}, Forbid: []string{}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
		signed, err := policy.Sign(key, "ops", policy.Document{Schema: policy.Schema, ID: "fix", Version: 1, Capability: grant, Semantic: policy.Semantic{MaxRisk: 0.5}})
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := json.Marshal(episode.Spec{OriginIntent: "fix app.txt", Repo: repo, BaseOID: base, Policy: signed, Envelope: grant,
			Argv: []string{"/bin/bash", "-c", "cd /workspace && echo fixed > app.txt"}, LeaseTTL: time.Hour, MaxRepairs: 1,
			Harvest: &episode.HarvestSpec{TargetID: "shop", Ref: ref, Create: true}})
		ep, err := c.Start(ctx, spec)
		if err != nil {
			t.Fatalf("start: %v\n%s", err, logs)
		}
		for {
			v, err := c.Episode(ctx, ep.ID)
			if err == nil && v.Live == nil && v.Outcome != nil {
				if v.Outcome.Kind != episode.OutcomeLanded || v.Outcome.Ref != ref {
					t.Fatalf("outcome %+v\n%s", v.Outcome, logs)
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the episode did not end: %+v %v\n%s", v, err, logs)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got := testbed.Git(t, repo, "show", ref+":app.txt"); got != "fixed" {
			t.Fatalf("%s:app.txt = %q", ref, got)
		}
	}
	land("refs/heads/agent/shell/one")

	// A restart: the target is read back, and served.
	k.restart()
	var list []targets.Entry
	out.Reset()
	if code := repoCmd([]string{"list", "--json", "--config", cfgPath}, &out, &errb); code != 0 || json.Unmarshal(out.Bytes(), &list) != nil ||
		len(list) != 1 || list[0].ID != "shop" || !list[0].Added {
		t.Fatalf("repo list after restart: exit %d %s%s", code, out.String(), errb.String())
	}
	land("refs/heads/agent/shell/two")
}
