package episode_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/store"
)

const pinnedModel = "fixture-model-1"

// modelServer is a keyless chat-completions fixture on loopback whose
// n-th answer (1-based) is script(n): deterministic by request count.
type modelServer struct {
	*httptest.Server
	mu sync.Mutex
	n  int
}

func newModelServer(t *testing.T, script func(n int, w http.ResponseWriter)) *modelServer {
	t.Helper()
	m := &modelServer{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		m.mu.Lock()
		m.n++
		n := m.n
		m.mu.Unlock()
		script(n, w)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *modelServer) requests() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// answer writes a completion from model rating the bank with levels.
func answer(w http.ResponseWriter, model string, levels ...string) {
	obs := map[string]string{}
	for i, n := range sensor.Bank() {
		obs[string(n)] = levels[i]
	}
	content, _ := json.Marshal(map[string]any{"schema": sensor.SchemaVersion, "observations": obs})
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fixture", "object": "chat.completion", "created": 1700000000, "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": string(content), "refusal": nil}}},
	})
}

func modelClient(t *testing.T, m *modelServer) *sensor.Client {
	t.Helper()
	c, err := sensor.NewClient(sensor.ClientConfig{Endpoint: m.URL + "/v1/chat/completions", Model: pinnedModel,
		AllowedModels: []string{pinnedModel}, Timeout: 5 * time.Second, RequestLimit: 256 << 10, EvidenceLimit: 128 << 10,
		ResponseLimit: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// retryWorker fixes calc.sh, then up to $PROBE times (the launcher's env allowlist has PROBE): (re)proposes the
// fix as a new revision of one git_commit effect, evaluates and tries to
// commit. Each refused commit is printed; the worker gives up after the
// last attempt.
const retryWorker = `
set -u
E=` + effectClient + `
G="git -c safe.directory=* -c core.hooksPath=/dev/null"
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
cd /workspace
sh test.sh >/dev/null || sed -i 's/1+1+1/1+1/' calc.sh
sh test.sh >/dev/null || { echo "TEST-STILL-FAILS"; exit 1; }
$G diff --binary > /tmp/fix.patch || { echo DIFF-FAILED; exit 1; }
T="{\"base_oid\":\"$($G rev-parse HEAD)\",\"ref\":\"refs/heads/main\",\"message\":\"fix calc\"}"
id=""; rev=0
for a in $(seq 1 "$PROBE"); do
  if [ -z "$id" ]; then
    p=$($E prepare -kind git_commit -target-id repo -target "$T" -payload /tmp/fix.patch) || { echo "PREPARE-FAILED $p"; exit 1; }
  else
    p=$($E prepare -effect "$id" -revision "$rev" -kind git_commit -target-id repo -target "$T" -payload /tmp/fix.patch) || { echo "REVISE-FAILED $p"; exit 1; }
  fi
  id=$(pick "$p" id); rev=$(pick "$p" revision)
  echo "EFFECT=$id REVISION=$rev"
  $E evaluate -effect "$id" -revision "$rev" >/dev/null || { echo "EVALUATE-FAILED $a"; exit 1; }
  if c=$($E commit -effect "$id" -revision "$rev"); then echo "STATE=$(pick "$c" state) ATTEMPT=$a"; exit 0; fi
  echo "COMMIT-REFUSED $a"
done
echo GAVE-UP
`

type semanticDecision struct {
	EffectID uuid.UUID
	Revision int
	Verdict  string
	Body     struct {
		Readings []struct {
			Identity     sensor.Identity     `json:"identity"`
			Cause        string              `json:"cause"`
			Observations []map[string]string `json:"observations"`
		} `json:"readings"`
		Action      string `json:"action"`
		Decider     string `json:"decider"`
		Level       string `json:"level"`
		LeaseDenied string `json:"lease_denied"`
	}
}

// recorder is the real store, with the semantic decisions the controller
// records kept for the test to read (the store has no read API for bodies;
// the ledger's decision events are checked against these).
type recorder struct {
	store.Store
	mu sync.Mutex
	ds []store.NewDecision
}

func (r *recorder) RecordDecision(ctx context.Context, d store.NewDecision) (store.Decision, error) {
	out, err := r.Store.RecordDecision(ctx, d)
	if err == nil && d.Kind == store.DecisionSemantic {
		r.mu.Lock()
		r.ds = append(r.ds, d)
		r.mu.Unlock()
	}
	return out, err
}

// semanticDecisions are the recorded semantic decisions, oldest first,
// each checked against the store's own decision_recorded events.
func (r *recorder) semanticDecisions(t *testing.T, ctx context.Context, st store.Store, ep uuid.UUID) []semanticDecision {
	t.Helper()
	var stored []decision
	for _, d := range decisions(t, ctx, st, ep) {
		if d.Kind == store.DecisionSemantic {
			stored = append(stored, d)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(stored) != len(r.ds) {
		t.Fatalf("store has %d semantic decisions, the controller recorded %d", len(stored), len(r.ds))
	}
	var out []semanticDecision
	for i, d := range r.ds {
		if s := stored[i]; s.EffectID != d.EffectID || s.Revision != d.Revision || s.Epoch != d.Epoch || s.Verdict != d.Verdict {
			t.Fatalf("stored decision %+v is not the recorded %+v", s, d)
		}
		sd := semanticDecision{EffectID: d.EffectID, Revision: d.Revision, Verdict: d.Verdict}
		if err := json.Unmarshal(d.Body, &sd.Body); err != nil {
			t.Fatal(err)
		}
		out = append(out, sd)
	}
	return out
}

func regulatorConfig() regulator.Config {
	// Two healthy readings per step up: sustained health, without waiting
	// on a clock.
	return regulator.Config{Start: regulator.Act, Max: regulator.Act, RecoverAfter: 2, RecoverFor: 0}
}

// liveRegulator is a live regulator of cfg.
func liveRegulator(t *testing.T, cfg regulator.Config) *regulator.Live {
	t.Helper()
	l, err := regulator.NewLive(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSemanticOutageDegradation is issue 6 §7 semantic_outage_degradation:
// the model server fails (an error answer), then lies about its model; the
// regulator lowers autonomy to advise and a class 3 git_commit is refused
// at the commit check, revision after revision, until two healthy answers
// in a row restore act — then the same fix commits.
func TestSemanticOutageDegradation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	model := newModelServer(t, func(n int, w http.ResponseWriter) {
		switch n {
		case 1:
			http.Error(w, "upstream down", http.StatusServiceUnavailable)
		case 2:
			answer(w, "gpt-unpinned", "low", "low", "low", "low", "low")
		default:
			answer(w, pinnedModel, "low", "low", "low", "medium", "low")
		}
	})
	r, rec := semanticRig(t, ctx, "episode_semantic_outage", model)
	e, err := r.k.Start(ctx, r.retrySpec(6))
	if err != nil {
		t.Fatal(err)
	}
	x := nextExit(t, ctx, e)
	out := string(x.Output)
	for _, want := range []string{"COMMIT-REFUSED 1", "COMMIT-REFUSED 2", "COMMIT-REFUSED 3", "STATE=committed ATTEMPT=4"} {
		if !strings.Contains(out, want) {
			t.Fatalf("worker output lacks %q:\n%s", want, out)
		}
	}
	ds := rec.semanticDecisions(t, ctx, r.st, e.ID())
	if len(ds) != 4 {
		t.Fatalf("semantic decisions: %+v", ds)
	}
	want := []struct {
		verdict, cause, model, level string
	}{
		{store.VerdictDeny, "outage", pinnedModel, "advise"},
		{store.VerdictDeny, "unpinned_model", "gpt-unpinned", "advise"},
		{store.VerdictDeny, "none", pinnedModel, "advise"}, // healthy once: not yet sustained
		{store.VerdictAllow, "none", pinnedModel, "act"},
	}
	for i, w := range want {
		d := ds[i]
		if d.Verdict != w.verdict || d.Body.Level != w.level || len(d.Body.Readings) != 2 {
			t.Fatalf("decision %d: %+v, want %+v", i, d, w)
		}
		rules, m := d.Body.Readings[0], d.Body.Readings[1]
		if rules.Identity.Implementation != "rules" || rules.Identity.Schema != sensor.SchemaVersion {
			t.Fatalf("decision %d rules identity %+v", i, rules.Identity)
		}
		if m.Identity.Implementation != "openai-chat" || m.Identity.Model != w.model || m.Cause != w.cause {
			t.Fatalf("decision %d model reading %+v, want %+v", i, m, w)
		}
	}
	if model.requests() != 4 {
		t.Fatalf("model asked %d times", model.requests())
	}
	if !strings.Contains(headMessage(t, r.repo), "fix calc") {
		t.Fatal("the fix did not land")
	}
	r.end(t, ctx, e, episode.Completed, "committed after recovery")
}

// TestSensorPoisoningInEpisode is issue 6 §7 sensor_poisoning at the
// episode level: a pinned model rating everything as benign as the schema
// allows is consulted on a patch the lease forbids (calc.sh; the adapter
// itself would take it). The deterministic denial stands: the decision is
// deny by the forbidden path, nothing commits, and the forbidden write is
// the kernel denial that contains the episode at once (max_repairs 0: for
// good) — no lease is ever minted beyond the first.
func TestSensorPoisoningInEpisode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	model := newModelServer(t, func(_ int, w http.ResponseWriter) {
		answer(w, pinnedModel, "low", "low", "low", "low", "low")
	})
	r, rec := semanticRig(t, ctx, "episode_sensor_poisoning", model)
	spec := r.retrySpec(2)
	spec.MaxRepairs = 0
	forbid := grantSpec()
	forbid.Forbid = []string{"calc.sh"}
	spec.Policy = signPolicy(forbid)
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, e)
	if s := e.Status(); s.State != episode.Contained || !strings.Contains(s.Why, "forbidden path write: calc.sh") {
		t.Fatalf("after a forbidden write: %+v", s)
	}
	ds := rec.semanticDecisions(t, ctx, r.st, e.ID())
	if len(ds) == 0 {
		t.Fatal("no semantic decision recorded")
	}
	for i, d := range ds {
		m := d.Body.Readings[len(d.Body.Readings)-1]
		if m.Identity.Implementation != "openai-chat" || m.Cause != "none" {
			t.Fatalf("decision %d: the hostile model was not heard: %+v", i, m)
		}
		for _, o := range m.Observations {
			if o["level"] != "low" {
				t.Fatalf("decision %d: fixture not hostile: %+v", i, o)
			}
		}
		if d.Verdict != store.VerdictDeny || d.Body.Decider != authority.DenyPathForbidden.String() || d.Body.Level != "act" {
			t.Fatalf("decision %d: poisoned evidence overrode the forbidden path: %+v", i, d)
		}
	}
	if got := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); got != r.base {
		t.Fatalf("authoritative main moved to %s", got)
	}
	evs, err := r.st.Events(ctx, e.ID())
	if err != nil {
		t.Fatal(err)
	}
	granted := 0
	for _, ev := range evs {
		if ev.Kind == "lease_granted" {
			granted++
		}
	}
	if granted != 1 {
		t.Fatalf("%d leases granted; the poisoned evidence must never mint another", granted)
	}
	if rep, err := r.st.VerifyLedger(ctx, e.ID()); err != nil {
		t.Fatalf("ledger: %+v, %v", rep, err)
	}
}

// semanticRig is a rig with verification whose sensor bank asks model and
// whose regulator is regulatorConfig's; rec records what it stores.
func semanticRig(t *testing.T, ctx context.Context, name string, model *modelServer) (*rig, *recorder) {
	t.Helper()
	client := modelClient(t, model)
	rec := &recorder{}
	r := newRig(t, ctx, name, withVerification(verifyArgv...), withRegulator(liveRegulator(t, regulatorConfig())),
		withGovernor(func(c *governor.Config) {
			c.Sensor = client
			rec.Store = c.Store
			c.Store = rec
		}))
	return r, rec
}

func (r *rig) retrySpec(attempts int) episode.Spec {
	s := r.spec(map[string]string{"PROBE": strconv.Itoa(attempts)})
	s.Argv = []string{"/bin/bash", "-c", retryWorker}
	return s
}
