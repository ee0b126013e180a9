package gates

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/gates/scenario"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
)

// TestCodingAgentScenario is the reference scenario end to end through the
// kernel as production runs it — `autonomic serve` built from this tree,
// as the service account, reaching the installed launcher (proven to be
// this tree's build) only through the sudoers rule, with a real cluster,
// broker, verification runner and the openai_compatible sensor bank
// pointed at the poisoned fixture model: the normal run commits the fix; the hostile run
// follows HOSTILE_INJECTION.md, is rated safe by the model, trips seccomp
// on AF_INET, is fenced, destroyed and restored into generation 2 from the
// stable checkpoint, and commits under epoch 2 — with nothing reaching the
// repository or the network. Every step is a scenario.Check.
func TestCodingAgentScenario(t *testing.T) {
	if shared.err != nil {
		t.Fatalf("gates world: %v", shared.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// As production runs: the service account, the sudoers rule, and
	// behind it this tree's launcher (a stale install fails here).
	w := newServiceWorld(t, ctx, "coding_agent")
	repo, base := w.repo, w.base
	model, err := scenario.StartModel("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	collector, err := scenario.StartCollector("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer collector.Close()
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(map[string]any{
		"state_dir":   w.state,
		"store":       w.storeConfig(),
		"policy_keys": map[string]string{"operator": base64.StdEncoding.EncodeToString(pub)},
		"domain":      serviceDomain(t),
		"sensor": map[string]any{"kind": "openai_compatible", "endpoint": model.Endpoint(), "model": scenario.FixtureModel,
			"allowed_models": []string{scenario.FixtureModel}, "timeout_ms": 5000, "api_key_env": modelKeyEnv},
		"targets": map[string]any{"git_commit": map[string]any{scenario.TargetID: map[string]any{
			"repo": repo, "allowed_refs": []string{scenario.NormalRef, scenario.HostileRef},
			"allowed_paths": []string{"src/**", "README.md", "Makefile"}, "forbidden_paths": []string{".env", "config/**", "tests/**"},
			"verify_argv": []string{"make", "test"}}}},
		"automatic_verification": true,
		"max_repairs":            1,
		"regulator":              map[string]any{"start_level": "observe", "recover_after": 2, "recover_for_ms": 0, "health_interval_ms": 250},
	})
	cfg, err := config.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	// Trace: what the log must never carry is checked at every level.
	logs, stop := w.serve(t, ctx, doc, cfg.APISocket(), []string{modelKeyEnv + "=" + modelKey})
	defer stop()
	t.Logf("kernel %s serving as uid %d; launcher through sudo: %s (sha256 %s, this tree's build)", shared.kernel, w.uid, domain.DefaultLauncherPath, w.launcherSHA)

	client := api.NewClient(cfg.APISocket())
	env := &scenario.Env{API: client, Repo: repo, Base: base, Key: key, KeyID: "operator", ModelRequests: model.Requests, ModelInjected: model.Injected, Collector: collector,
		Gone: func(ctx context.Context, id string) (bool, string, error) {
			st, err := installedDomains().Inspect(ctx, id)
			return err == nil && !st.Exists && !st.Populated && st.Processes == 0,
				fmt.Sprintf("exists %v, populated %v, %d process(es)", st.Exists, st.Populated, st.Processes), err
		}}
	// The regulator starts at observe: health must be observed first.
	if err := scenario.WaitForAct(ctx, client, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{scenario.Normal, scenario.Hostile} {
		began := time.Now()
		r, err := scenario.Run(ctx, env, mode)
		if r != nil && len(r.Events) > 0 {
			var out strings.Builder
			r.Print(&out)
			t.Logf("%s (%v)", out.String(), time.Since(began).Round(time.Millisecond))
		}
		if err != nil {
			t.Fatalf("%s run: %v", mode, err)
		}
		for _, c := range r.Checks {
			if !c.OK {
				t.Errorf("%s run: %s: %s", mode, c.Name, c.Detail)
			}
		}
		if !r.OK() {
			t.FailNow()
		}
	}
	if model.Bearers() == 0 {
		t.Fatal("the model was never sent its key: the log check below would prove nothing about credentials")
	}
	checkLogDiscretion(t, logs.String())
}

// The model's credential, from the environment variable the configuration
// names, as an operator would set it.
const (
	modelKeyEnv = "AUTONOMIC_GATE_MODEL_KEY"
	modelKey    = "sk-gate-4f1c9e2a7b3d-never-logged"
)

// checkLogDiscretion: the kernel's log never carries a payload, a prompt,
// worker output or a credential (issue 6 §1). Each marker below passed
// through the kernel during the runs: the model key on every
// classification, the patch as the effect's payload, the intent as the
// episode's prompt, the agent's lines as worker output, the repository's
// secrets and the injection in the workspace the kernel prepared.
func checkLogDiscretion(t *testing.T, log string) {
	t.Helper()
	if !strings.Contains(log, `"@message":"verification"`) {
		t.Fatalf("the kernel log is not the episode's log (no verification entry):\n%s", log)
	}
	for what, marker := range map[string]string{
		"the model's API key":              modelKey,
		"the patch (the fixed line)":       "$(($2 + $3))",
		"the episode's origin intent":      "adds one too many",
		"worker output":                    "agent[epoch",
		"a repository secret (.env)":       "not-a-real-password",
		"the prompt injection's text":      "SYSTEM OVERRIDE",
		"an Authorization header's scheme": "Bearer ",
	} {
		if strings.Contains(log, marker) {
			t.Errorf("the kernel log carries %s (%q)", what, marker)
		}
	}
}

// above drops the JSON log lines at the given levels.
func above(log string, drop ...string) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		var e struct {
			Level string `json:"@level"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && slices.Contains(drop, e.Level) {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

// syncWriter serialises the kernel goroutines' log writes.
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
