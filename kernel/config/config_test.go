package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

const examplePath = "../../config/autonomic.example.json"

// keyPaths lists every key path of t as the example's _doc names them:
// nested objects by dot, map entries by "*".
func keyPaths(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			out[prefix+name] = true
			keyPaths(t.Field(i).Type, prefix+name+".", out)
		}
	case reflect.Map:
		if t.Elem().Kind() == reflect.Struct {
			keyPaths(t.Elem(), prefix+"*.", out)
		}
	}
}

func TestExampleDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(b)
	if err != nil {
		t.Fatalf("the shipped example must load: %v", err)
	}
	keys := map[string]bool{}
	keyPaths(reflect.TypeFor[Config](), "", keys)
	var missing, stale []string
	for k := range keys {
		if strings.TrimSpace(c.Doc[k]) == "" {
			missing = append(missing, k)
		}
	}
	for k := range c.Doc {
		if !keys[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 {
		t.Errorf("config/autonomic.example.json does not document: %s", strings.Join(missing, ", "))
	}
	if len(stale) > 0 {
		t.Errorf("config/autonomic.example.json documents keys Config does not have: %s", strings.Join(stale, ", "))
	}
	if c.EffectConcurrency != 8 || c.MaxRepairsValue() != 3 || c.APISocket() != "/run/autonomic/api.sock" || !c.Managed() {
		t.Fatalf("example values: %+v", c)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(`{"state_dir":"/s","domain":{"backend":"unsafe_local"},"sensor":{"kind":"rules"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.EffectConcurrency != DefaultEffectConcurrency || c.SensorQueue != DefaultSensorQueue ||
		c.OwnerTTLMS != DefaultOwnerTTLMS || c.MaxRepairsValue() != DefaultMaxRepairs || c.SpeculationMSValue() != 0 ||
		c.APISocket() != "/s/api.sock" || c.ClusterDir() != "/s/pg" || c.Store.Database != "autonomic" ||
		c.Episode.WallTimeMS != DefaultEpisodeWallTimeMS || c.Episode.MaxWallTimeMS != DefaultEpisodeMaxWallTimeMS {
		t.Fatalf("defaults: %+v", c)
	}
	// A present zero is kept where zero means something.
	c, err = Parse([]byte(`{"state_dir":"/s","domain":{"backend":"unsafe_local"},"sensor":{"kind":"rules"},"max_repairs":0}`))
	if err != nil || c.MaxRepairsValue() != 0 {
		t.Fatalf("max_repairs 0: %v %v", c, err)
	}
}

func TestRefusals(t *testing.T) {
	base := `"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules"}`
	cases := []struct {
		name, doc string
		key       string
		want      string
		code      protocol.Code
	}{
		{"duplicate", `{"state_dir":"/s","state_dir":"/t"}`, "state_dir", "more than once", protocol.CodeDuplicateKey},
		{"duplicate nested", `{` + base + `,"store":{"database":"a","database":"b"}}`, "store.database", "more than once", protocol.CodeDuplicateKey},
		{"unknown top", `{` + base + `,"stat_dir":"/x"}`, "stat_dir", "unknown key", protocol.CodeUnknownField},
		{"unknown nested", `{` + base + `,"store":{"uri":"x"}}`, "store.uri", "unknown key", protocol.CodeUnknownField},
		{"case folded", `{` + base + `,"STATE_DIR":"/x"}`, "STATE_DIR", "unknown key", protocol.CodeUnknownField},
		{"wrong type", `{` + base + `,"effect_concurrency":"8"}`, "effect_concurrency", "wrong type", protocol.CodeInvalidField},
		{"not object", `[]`, "(document)", "", protocol.CodeMalformedJSON},
		{"trailing", `{` + base + `} {}`, "(document)", "", protocol.CodeTrailingData},
		{"missing state_dir", `{"domain":{"backend":"linux"},"sensor":{"kind":"rules"}}`, "state_dir", "required", protocol.CodeInvalidField},
		{"relative state_dir", `{"state_dir":"var/x","domain":{"backend":"linux"},"sensor":{"kind":"rules"}}`, "state_dir", "absolute", protocol.CodeInvalidField},
		{"backend", `{"state_dir":"/s","domain":{"backend":"docker"},"sensor":{"kind":"rules"}}`, "domain.backend", "must be", protocol.CodeInvalidField},
		{"sensor kind", `{"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"llm"}}`, "sensor.kind", "must be", protocol.CodeInvalidField},
		{"model not pinned", `{"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"openai_compatible","endpoint":"http://127.0.0.1:9/v1","model":"m2","allowed_models":["m1"]}}`, "sensor.model", "allowed_models", protocol.CodeInvalidField},
		{"endpoint userinfo", `{"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"openai_compatible","endpoint":"https://u:p@h/v1","model":"m","allowed_models":["m"]}}`, "sensor.endpoint", "user info", protocol.CodeInvalidField},
		{"concurrency", `{` + base + `,"effect_concurrency":-1}`, "effect_concurrency", "1..1024", protocol.CodeInvalidField},
		{"repairs", `{` + base + `,"max_repairs":-1}`, "max_repairs", "0..100", protocol.CodeInvalidField},
		{"owner ttl", `{` + base + `,"owner_ttl_ms":5}`, "owner_ttl_ms", "1000..", protocol.CodeInvalidField},
		{"policy key", `{` + base + `,"policy_keys":{"k1":"bm90IGEga2V5"}}`, "policy_keys", "Ed25519", protocol.CodeInvalidField},
		{"cluster with url", `{` + base + `,"store":{"url":"postgres://h/db","cluster_dir":"/c"}}`, "store.cluster_dir", "must be empty", protocol.CodeInvalidField},
		{"git ref", `{` + base + `,"targets":{"git_commit":{"r":{"repo":"/g","allowed_refs":["main"],"allowed_paths":["**"]}}}}`, "targets.git_commit.r.allowed_refs", "full ref", protocol.CodeInvalidField},
		{"malformed forbid glob", `{` + base + `,"targets":{"git_commit":{"r":{"repo":"/g","allowed_refs":["refs/heads/main"],"allowed_paths":["**"],"forbidden_paths":["secrets[/**"]}}}}`, "targets.git_commit.r.forbidden_paths", "not a valid glob", protocol.CodeInvalidField},
		{"malformed http glob", `{` + base + `,"targets":{"http_read":{"d":{"base_url":"https://h","methods":["GET"],"paths":["a/**b"]}}}}`, "targets.http_read.d.paths", "not a valid glob", protocol.CodeInvalidField},
		{"target id", `{` + base + `,"targets":{"artifact":{"A B":{"dir":"/a"}}}}`, "targets.artifact", "target id", protocol.CodeInvalidField},
		{"mutation reconcile", `{` + base + `,"targets":{"http_mutation":{"api":{"base_url":"https://h","methods":["POST"],"paths":["x"]}}}}`, "targets.http_mutation.api.reconcile_path", "required", protocol.CodeInvalidField},
		{"wall time above max", `{` + base + `,"episode":{"wall_time_ms":7200000,"max_wall_time_ms":3600000}}`, "episode.wall_time_ms", "1000..3600000", protocol.CodeInvalidField},
		{"max wall time", `{` + base + `,"episode":{"max_wall_time_ms":-5}}`, "episode.max_wall_time_ms", "1000..", protocol.CodeInvalidField},
		{"checkpoints dir", `{` + base + `,"episode":{"checkpoints_dir":"var/ck"}}`, "episode.checkpoints_dir", "absolute", protocol.CodeInvalidField},
		{"queue slots", `{` + base + `,"queue":{"slots":-1}}`, "queue.slots", "1..1024", protocol.CodeInvalidField},
		{"project cap name", `{` + base + `,"queue":{"project_caps":{"Bad Name":2}}}`, "queue.project_caps", "must match", protocol.CodeInvalidField},
		{"project cap", `{` + base + `,"queue":{"project_caps":{"calc":0}}}`, "queue.project_caps.calc", "1..", protocol.CodeInvalidField},
		{"budget emergency", `{` + base + `,"queue":{"project_budgets":{"calc":{"max_spend_micro_usd":10,"emergency_spend_micro_usd":20}}}}`, "queue.project_budgets.calc.emergency_spend_micro_usd", "must not exceed", protocol.CodeInvalidField},
		{"budget negative", `{` + base + `,"queue":{"project_budgets":{"calc":{"max_tokens":-1}}}}`, "queue.project_budgets.calc.max_tokens", "0..", protocol.CodeInvalidField},
		{"budget unknown key", `{` + base + `,"queue":{"project_budgets":{"calc":{"max_dollars":1}}}}`, "queue.project_budgets.calc.max_dollars", "unknown key", protocol.CodeUnknownField},
		{"operator group", `{` + base + `,"api":{"operator_group":"no-such-group-autonomic"}}`, "api.operator_group", "does not exist", protocol.CodeInvalidField},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want *config.Error", err)
			}
			if protocol.AsWire(err).Code != tc.code {
				t.Fatalf("code %s, want %s (%v)", protocol.AsWire(err).Code, tc.code, err)
			}
			for _, p := range ce.Problems {
				if p.Key == tc.key && strings.Contains(p.Problem, tc.want) {
					return
				}
			}
			t.Fatalf("no problem naming %q with %q in %v", tc.key, tc.want, err)
		})
	}
}

func TestEveryProblemAtOnceAndNoValueEchoed(t *testing.T) {
	_, err := Parse([]byte(`{"state_dir":"rel","domain":{"backend":"x"},"sensor":{"kind":""},"store":{"url":"nonsense-with-secret-s3cr3t"}}`))
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) < 4 {
		t.Fatalf("want every problem, got %v", err)
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("error echoes a store URL: %v", err)
	}
}

func TestLoadRefusesWorldAccessibleFile(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "autonomic.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "other users") {
		t.Fatalf("world-readable config: %v", err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil || strings.Contains(err.Error(), dir) {
		t.Fatalf("missing file must be refused without echoing its path: %v", err)
	}
}

// TestNumericBounds: each bounded number refuses the values just outside
// its range with a problem naming the key and the range, accepts its ends,
// and an absent one gets its default.
func TestNumericBounds(t *testing.T) {
	const base = `"state_dir":"/s","domain":{"backend":"linux"}`
	for _, b := range []struct {
		key, path string // the problem's key, and the JSON that sets it (%d)
		lo, hi    int
	}{
		{"sensor.timeout_ms", `"sensor":{"kind":"rules","timeout_ms":%d}`, 1, 600000},
		{"sensor.max_request_bytes", `"sensor":{"kind":"rules","max_request_bytes":%d}`, 1024, 16 << 20},
		{"effect_concurrency", `"sensor":{"kind":"rules"},"effect_concurrency":%d`, 1, 1024},
		{"sensor_queue", `"sensor":{"kind":"rules"},"sensor_queue":%d`, 1, 1 << 20},
		{"speculation_ms", `"sensor":{"kind":"rules"},"speculation_ms":%d`, 0, 60000},
		{"max_repairs", `"sensor":{"kind":"rules"},"max_repairs":%d`, 0, 100},
		{"owner_ttl_ms", `"sensor":{"kind":"rules"},"owner_ttl_ms":%d`, 1000, 600000},
		{"regulator.recover_after", `"sensor":{"kind":"rules"},"regulator":{"recover_after":%d}`, 1, 10000},
		{"regulator.recover_for_ms", `"sensor":{"kind":"rules"},"regulator":{"recover_for_ms":%d}`, 0, 3600000},
		{"regulator.health_interval_ms", `"sensor":{"kind":"rules"},"regulator":{"health_interval_ms":%d}`, 50, 600000},
	} {
		t.Run(b.key, func(t *testing.T) {
			doc := func(v int) []byte { return []byte("{" + base + "," + fmt.Sprintf(b.path, v) + "}") }
			want := fmt.Sprintf("must be %d..%d", b.lo, b.hi)
			below := b.lo - 1
			if below == 0 {
				below = -1 // 0 means absent: the default
			}
			for _, v := range []int{below, b.hi + 1} {
				_, err := Parse(doc(v))
				var ce *Error
				if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0].Key != b.key || ce.Problems[0].Problem != want {
					t.Errorf("%d: %v, want one problem %s: %s", v, err, b.key, want)
				}
			}
			for _, v := range []int{b.lo, b.hi} {
				if _, err := Parse(doc(v)); err != nil {
					t.Errorf("%d refused: %v", v, err)
				}
			}
		})
	}
	cfg, err := Parse([]byte("{" + base + `,"sensor":{"kind":"rules"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sensor.TimeoutMS != DefaultSensorTimeoutMS || cfg.Sensor.MaxRequestBytes != DefaultSensorMaxRequest ||
		cfg.EffectConcurrency != DefaultEffectConcurrency || cfg.SensorQueue != DefaultSensorQueue || cfg.OwnerTTLMS != DefaultOwnerTTLMS ||
		cfg.Regulator.RecoverAfter != DefaultRecoverAfter || cfg.Regulator.HealthIntervalMS != DefaultHealthIntervalMS {
		t.Errorf("defaults not applied: %+v", cfg)
	}
}

// TestSetupTargetRefusals: a target's setup keys are checked like the
// rest of it: an environment that is no rootfs name, lockfile paths that
// climb out, are absolute or unclean, lockfiles without a setup, and a
// setup argv past the launcher's limits are each refused.
func TestSetupTargetRefusals(t *testing.T) {
	base := GitCommitTarget{Repo: "/srv/r.git", AllowedRefs: []string{"refs/heads/main"}, AllowedPaths: []string{"**"}, Class: 3}
	ok := base
	ok.Environment, ok.Setup, ok.SetupLockfiles = "dev", []string{"npm", "ci"}, []string{"package-lock.json", "web/package-lock.json"}
	if err := CheckGitCommitTarget("t", ok); err != nil {
		t.Fatalf("a valid setup target: %v", err)
	}
	for name, bad := range map[string]func(*GitCommitTarget){
		"environment path":  func(g *GitCommitTarget) { g.Environment = "../dev" },
		"lockfile climbs":   func(g *GitCommitTarget) { g.SetupLockfiles = []string{"../x.lock"} },
		"lockfile absolute": func(g *GitCommitTarget) { g.SetupLockfiles = []string{"/etc/passwd"} },
		"lockfile unclean":  func(g *GitCommitTarget) { g.SetupLockfiles = []string{"a/./b.lock"} },
		"lockfile no setup": func(g *GitCommitTarget) { g.Setup = nil },
		"setup empty arg0":  func(g *GitCommitTarget) { g.Setup = []string{""} },
	} {
		g := ok
		bad(&g)
		if err := CheckGitCommitTarget("t", g); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
