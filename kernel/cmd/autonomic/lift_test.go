package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol/gitref"
)

// TestRunLiftsInTheSignedPolicy: `autonomic run --lift NAME` puts the
// lift in the policy the operator signs and in the envelope, so the
// lease the kernel mints lifts it; without --lift, nothing is lifted; a
// name that is no default rule is refused before anything is signed.
func TestRunLiftsInTheSignedPolicy(t *testing.T) {
	key, err := loadOrMakeKey(filepath.Join(t.TempDir(), "operator.pem"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := policy.ParseKeys(map[string]string{key.keyID: key.pub})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{}
	cfg.Inference.Providers = map[string]config.Provider{"local": {WireAPI: "responses", Upstream: "http://127.0.0.1:1", Models: []string{"m"}}}
	for _, lifts := range [][]string{nil, {authority.LiftDependencies, authority.LiftCI}} {
		raw, _, _, err := agentSpec(agentRun{Agent: "codex", Task: "add a dependency", Repo: "/r", Base: strings.Repeat("a", 40),
			Ref: "refs/heads/agent/codex", TargetID: "r", Key: key, Cfg: cfg, Lifts: lifts})
		if err != nil {
			t.Fatal(err)
		}
		var spec episode.Spec
		if err := json.Unmarshal(raw, &spec); err != nil {
			t.Fatal(err)
		}
		pol, err := policy.Verify(keys, spec.Policy)
		if err != nil {
			t.Fatal(err)
		}
		lease := authority.Intersect(pol.Capability, authority.MustCompile(spec.Envelope))
		for _, name := range authority.Lifts() {
			want := slices.Contains(lifts, name)
			if got := lease.Lifted(name); got != want {
				t.Errorf("lifts %v: the lease lifts %s = %v", lifts, name, got)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := runCmd([]string{"--repo", "/r", "--agent", "codex", "--lift", "everything", "x"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "not a default rule") {
		t.Errorf("--lift everything: exit %d\n%s", code, errb.String())
	}
}

// TestDefaultRefIsOneBranchPerRun: with allowed_ref_prefixes, each run's
// default ref is a new branch of its own under the first prefix, named
// for the agent; without, the old default holds.
func TestDefaultRefIsOneBranchPerRun(t *testing.T) {
	tg := config.GitCommitTarget{AllowedRefs: []string{"refs/heads/agent/codex"}, AllowedRefPrefixes: []string{"refs/heads/agent/"}}
	seen := map[string]bool{}
	for range 50 {
		ref, err := defaultRef(tg, "codex")
		if err != nil || !strings.HasPrefix(ref, "refs/heads/agent/codex/") || !gitref.Under(ref, tg.AllowedRefPrefixes) || seen[ref] {
			t.Fatalf("%q, %v (seen before: %v)", ref, err, seen[ref])
		}
		seen[ref] = true
	}
	tg.AllowedRefPrefixes = nil
	if ref, err := defaultRef(tg, "codex"); err != nil || ref != "refs/heads/agent/codex" {
		t.Fatalf("without prefixes: %q, %v", ref, err)
	}
}
