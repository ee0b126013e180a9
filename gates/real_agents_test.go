package gates

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	agent "github.com/autonomic-kernel/autonomic/agents"
	"github.com/autonomic-kernel/autonomic/gates/scenario"
	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
)

// TestRealAgentsFixTheReferenceRepository is the main job as production
// runs it: `autonomic serve` (this tree's build) as the service account,
// the installed launcher (this tree's) through the sudoers rule with its
// installed agents rootfs, and `autonomic run --repo --agent TASK` as the
// operator. For each shipped agent, the real CLI runs in a real domain,
// reaches a fixture model speaking its wire API only through its relay
// (internal/fixturemodel's "fix the reference repo" script), and edits
// src/calc.sh without knowing anything of effects; the harvest — reading
// the checkpoint archive as the service account — lands the change on
// refs/heads/agent/<name> through the horizon (verification included).
// The provider saw only its inference route, always with the kernel's key;
// the ledger holds every call and the episode ended landed.
func TestRealAgentsFixTheReferenceRepository(t *testing.T) {
	if shared.err != nil {
		t.Fatalf("gates world: %v", shared.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	lc := installedLauncherConfig(t)
	if _, ok := lc.Rootfses["agents"]; !ok {
		t.Fatal("the installed launcher has no agents rootfs (make install builds it where npm is reachable)")
	}
	// Each agent's change lands on its own ref, which starts at the base.
	var refs []string
	for _, name := range agent.Names() {
		refs = append(refs, "refs/heads/agent/"+name)
	}
	w := newServiceWorld(t, ctx, "real_agents", refs...)
	tmp, repo, base, state, uid, gid := w.tmp, w.repo, w.base, w.state, w.uid, w.gid

	const keyEnv, key = "AUTONOMIC_GATE_PROVIDER_KEY", "sk-gate-provider-61b0d3-kernel-only"
	models := map[string]*fixturemodel.Server{}
	providers := map[string]any{}
	for _, name := range agent.Names() {
		p, err := agent.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := fixturemodel.Start(fixturemodel.FixCalc(p.WireAPI, "/workspace"))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		models[name] = m
		providers["fixture-"+name] = map[string]any{"wire_api": p.WireAPI, "upstream": m.URL, "credential_env": keyEnv,
			"models": []string{p.Model}, "prices": map[string]any{p.Model: map[string]any{"input_micro_usd_per_mtok": 1_000_000, "output_micro_usd_per_mtok": 4_000_000}}}
	}
	kernelConfig := func(policyKeys map[string]string) []byte {
		doc, _ := json.Marshal(map[string]any{
			"state_dir":   state,
			"store":       w.storeConfig(),
			"policy_keys": policyKeys,
			"domain":      serviceDomain(t),
			"sensor":      map[string]any{"kind": "rules"},
			"targets": map[string]any{"git_commit": map[string]any{scenario.TargetID: map[string]any{
				"repo": repo, "allowed_refs": refs,
				"allowed_paths": []string{"src/**", "README.md", "Makefile"}, "forbidden_paths": []string{".env", "config/**", "tests/**"},
				"verify_argv": []string{"make", "test"}}}},
			"automatic_verification": true,
			"max_repairs":            1,
			"regulator":              map[string]any{"start_level": "act"},
			"inference":              map[string]any{"providers": providers},
			"episode":                map[string]any{"checkpoints_dir": filepath.Join(lc.StateRoot, "checkpoints")},
			"api":                    map[string]any{"socket": filepath.Join(state, "api.sock")},
		})
		return doc
	}

	// The operator's first run makes the key and says how to register it.
	// The operator here is the service account (as in make demo): git
	// refuses a repository another user owns, and the API socket is its.
	opDir := filepath.Join(tmp, "operator")
	if err := os.Mkdir(opDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(opDir, "autonomic.json")
	keyPath := filepath.Join(opDir, "key", "operator.pem")
	writeConfig := func(doc []byte) {
		if err := os.WriteFile(cfgPath, doc, 0o600); err != nil {
			t.Fatal(err)
		}
		chownTree(t, opDir, uid, gid)
	}
	writeConfig(kernelConfig(map[string]string{}))
	task := "Fix the failing test: src/calc.sh adds one too many. Do not change the tests."
	run := func(args ...string) (int, string) {
		cmd := exec.CommandContext(ctx, shared.kernel, append([]string{"run", "--config", cfgPath, "--key", keyPath}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + opDir, "LANG=C.UTF-8"}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	}
	code, out := run("--repo", repo, "--agent", "codex", task)
	reg := regexp.MustCompile(`add  "(operator-[0-9a-f]{8})": "([A-Za-z0-9+/=]{44})"`).FindStringSubmatch(out)
	if code != 2 || reg == nil {
		t.Fatalf("a first run: exit %d, want 2 with the key to register\n%s", code, out)
	}
	doc := kernelConfig(map[string]string{reg[1]: reg[2]})
	writeConfig(doc)
	cfg, err := config.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	logs, stop := w.serve(t, ctx, doc, cfg.APISocket(), []string{keyEnv + "=" + key})
	defer stop()
	client := api.NewClient(cfg.APISocket())

	for _, name := range agent.Names() {
		t.Run(name, func(t *testing.T) {
			p, _ := agent.Load(name)
			m := models[name]
			ref := "refs/heads/agent/" + name
			began := time.Now()
			code, out := run("--repo", repo, "--agent", name, task)
			t.Logf("autonomic run --agent %s: exit %d in %v\n%s", name, code, time.Since(began).Round(time.Millisecond), out)
			landed := regexp.MustCompile(`(?m)^landed: ` + regexp.QuoteMeta(ref) + ` at ([0-9a-f]{40}) \(effect [0-9a-f-]{36}\)$`).FindStringSubmatch(out)
			id := regexp.MustCompile(`(?m)^episode ([0-9a-f-]{36}): `).FindStringSubmatch(out)
			if code != 0 || landed == nil || id == nil {
				t.Fatalf("the run did not end landed on %s", ref)
			}
			head, err := scenario.Git(ctx, repo, "rev-parse", ref)
			if err != nil || strings.TrimSpace(head) != landed[1] {
				t.Errorf("%s is %q (%v), the command said %s", ref, head, err, landed[1])
			}
			if parent, _ := scenario.Git(ctx, repo, "rev-parse", ref+"^"); strings.TrimSpace(parent) != base {
				t.Errorf("the commit's parent is %q, want the base %s", parent, base)
			}
			calc, _ := scenario.Git(ctx, repo, "show", ref+":"+fixturemodel.CalcFile)
			if !strings.Contains(calc, fixturemodel.CalcFix) || strings.Contains(calc, fixturemodel.CalcBug) {
				t.Errorf("landed src/calc.sh:\n%s", calc)
			}
			if files, _ := scenario.Git(ctx, repo, "diff", "--name-only", base, ref); strings.TrimSpace(files) != fixturemodel.CalcFile {
				t.Errorf("the commit changes %q, want only %s", files, fixturemodel.CalcFile)
			}
			reqs := m.Requests()
			if len(reqs) == 0 {
				t.Fatal("the fixture model saw no request")
			}
			for _, q := range reqs {
				got, want := q.Header.Get("Authorization"), "Bearer "+key
				if p.WireAPI == fixturemodel.Messages {
					got, want = q.Header.Get("X-Api-Key"), key
				}
				if q.Method != "POST" || q.Path != fixturemodel.Routes[p.WireAPI] || got != want {
					t.Errorf("the provider saw %s %s with credential %q", q.Method, q.Path, got)
				}
			}
			v, err := client.Episode(ctx, id[1])
			if err != nil || v.Outcome == nil || v.Outcome.Kind != episode.OutcomeLanded || v.Outcome.Commit != landed[1] {
				t.Errorf("episode view: %+v, %v", v.Outcome, err)
			}
			events, err := client.Events(ctx, id[1], -1, 1000)
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			for _, e := range events {
				if e.Kind == "inference_call" {
					calls++
				}
			}
			if calls != len(reqs) {
				t.Errorf("the ledger holds %d inference calls, the provider saw %d", calls, len(reqs))
			}
		})
	}
	if strings.Contains(logs.String(), key) {
		t.Error("the kernel log carries the provider key")
	}
}

// launcherConfig is what the gates read of the installed launcher's
// configuration.
type launcherConfig struct {
	StateRoot string                     `json:"state_root"`
	Rootfses  map[string]json.RawMessage `json:"rootfses"`
}

func installedLauncherConfig(t *testing.T) launcherConfig {
	t.Helper()
	b, err := os.ReadFile("/etc/autonomic/launcher.json")
	if err != nil {
		t.Fatalf("installed launcher configuration (make install): %v", err)
	}
	var lc launcherConfig
	if err := json.Unmarshal(b, &lc); err != nil {
		t.Fatal(err)
	}
	return lc
}
