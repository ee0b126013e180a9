package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// lockedBuffer is a log sink the kernel's goroutines share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeRunsEpisodes composes the whole kernel from a configuration
// file — a real launcher (run directly), a real cluster, the broker with
// its adapters and automatic verification — and drives an episode through
// the operator commands: start, status, abort; the domain is then gone.
func TestServeRunsEpisodes(t *testing.T) {
	privileged.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
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
	tmp, err := os.MkdirTemp("", "autonomic-serve-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	// The cluster runs as an unprivileged account, which must reach it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	cluster := storetest.Start(t)
	if err := cluster.CreateDatabase(ctx, "kernel"); err != nil {
		t.Fatal(err)
	}
	t.Logf("testbed and cluster ready in %v", time.Since(began).Round(time.Millisecond))

	// The authoritative repository.
	repo, base := testbed.BareRepo(t, tmp, "authoritative.git", map[string]string{"test.sh": "echo PASS\n", "greeting.txt": "hi\n"}, "base")

	rel, err := filepath.Rel(testbed.CgroupV2Mount(), bed.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	// The operator's policy key, made and later used by the CLI.
	keyFile := filepath.Join(tmp, "policy.pem")
	var keyOut, keyErr bytes.Buffer
	if code := effectCmd([]string{"keygen", "--out", keyFile}, &keyOut, &keyErr); code != 0 {
		t.Fatalf("keygen: %s", keyErr.String())
	}
	state := filepath.Join(tmp, "state")
	doc, _ := json.Marshal(map[string]any{
		"policy_keys": map[string]string{"ops-1": strings.TrimSpace(keyOut.String())},
		"state_dir":   state,
		"store":       map[string]any{"url": cluster.KernelConnString("kernel"), "admin_url": cluster.AdminConnString("kernel")},
		"domain": map[string]any{"backend": "linux", "launcher_path": bed.Launcher, "direct": true,
			"workspaces_root": bed.Workspaces, "sockets_root": bed.Sockets, "cgroup_parent": "/" + rel},
		"sensor": map[string]any{"kind": "rules"},
		"targets": map[string]any{
			"git_commit": map[string]any{"repo": map[string]any{"repo": repo, "allowed_refs": []string{"refs/heads/main"},
				"allowed_paths": []string{"**"}, "verify_argv": []string{"sh", "test.sh"}}},
			"artifact": map[string]any{"reports": map[string]any{"dir": filepath.Join(tmp, "artifacts")}},
		},
		"automatic_verification": true,
		"max_repairs":            1,
		// Starts at observe; two healthy store probes reach act.
		"regulator": map[string]any{"start_level": "observe", "recover_after": 1, "recover_for_ms": 0, "health_interval_ms": 250},
	})
	cfgPath := filepath.Join(tmp, "autonomic.json")
	if err := os.WriteFile(cfgPath, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}

	logs := &lockedBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Name: "autonomic", Output: logs, JSONFormat: true, Level: hclog.Info})
	owner := [2]int{bed.OwnerUID, bed.OwnerGID}
	bootAt := time.Now()
	stop := startServe(t, ctx, cfg, log, logs, &owner)
	t.Logf("kernel composed, recovered and serving in %v", time.Since(bootAt).Round(time.Millisecond))
	for _, want := range []string{`"@message":"recovery"`, `"episodes":true`, `"@message":"system regulator"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("startup log lacks %q:\n%s", want, logs)
		}
	}
	// The store probe feeds the regulator: sustained health climbs to act,
	// one level at a time.
	waitLog(t, logs, `"to":"advise"`)
	waitLog(t, logs, `"to":"act"`)
	// Every key is acted on by a kernel that runs episodes with automatic
	// verification.
	if strings.Contains(logs.String(), "accepted but not used") {
		t.Errorf("startup log warns of unused keys:\n%s", logs)
	}

	run := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := episodeCmd(args, &out, &errb); code != want {
			t.Fatalf("episode %v: exit %d (want %d): %s %s\n%s", args, code, want, out.String(), errb.String(), logs)
		}
		return out.String()
	}
	grant := authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}},
		Allow: []string{"**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
	policyDoc, _ := json.Marshal(policy.Document{Schema: policy.Schema, ID: "hello", Version: 1, Capability: grant,
		Semantic: policy.Semantic{MaxRisk: 0.5}})
	var signed, signErr bytes.Buffer
	if code := policyCmd([]string{"sign", "--key", keyFile, "--key-id", "ops-1"}, bytes.NewReader(policyDoc), &signed, &signErr); code != 0 {
		t.Fatalf("policy sign: %s", signErr.String())
	}
	spec, _ := json.Marshal(episode.Spec{OriginIntent: "say hello and exit", Repo: repo, BaseOID: base,
		Policy: json.RawMessage(bytes.TrimSpace(signed.Bytes())), Envelope: grant,
		Argv: []string{"/bin/bash", "-c", "echo hello; exit 0"}, LeaseTTL: time.Hour})
	// No max_repairs in the spec: the kernel's (1) applies.
	var specDoc map[string]any
	json.Unmarshal(spec, &specDoc)
	delete(specDoc, "max_repairs")
	spec, _ = json.Marshal(specDoc)
	specPath := filepath.Join(tmp, "spec.json")
	if err := os.WriteFile(specPath, spec, 0o600); err != nil {
		t.Fatal(err)
	}

	// A spec asking for more repairs than the kernel allows is refused.
	var wide map[string]any
	json.Unmarshal(spec, &wide)
	wide["max_repairs"] = 2
	wideDoc, _ := json.Marshal(wide)
	widePath := filepath.Join(tmp, "wide.json")
	os.WriteFile(widePath, wideDoc, 0o600)
	run(1, "start", "--spec", widePath, "--config", cfgPath)

	// An unsigned policy, one signed by a key policy_keys does not hold
	// under a known key id, and a spec error are refused with their codes
	// and change nothing.
	_, stranger, _ := ed25519.GenerateKey(nil)
	wrong, _ := policy.Sign(stranger, "ops-1", policy.Document{Schema: policy.Schema, ID: "hello", Version: 1, Capability: grant,
		Semantic: policy.Semantic{MaxRisk: 0.5}})
	unsigned, _ := json.Marshal(map[string]any{"policy": json.RawMessage(policyDoc)})
	for name, c := range map[string]struct {
		set  func(map[string]any)
		want string
	}{
		"unsigned":  {func(m map[string]any) { m["policy"] = json.RawMessage(unsigned) }, "forbidden"},
		"wrong key": {func(m map[string]any) { m["policy"] = json.RawMessage(wrong) }, "forbidden"},
		"bad oid":   {func(m map[string]any) { m["base_oid"] = "main" }, "invalid_field"},
	} {
		var m map[string]any
		json.Unmarshal(spec, &m)
		c.set(m)
		b, _ := json.Marshal(m)
		p := filepath.Join(tmp, "refused.json")
		os.WriteFile(p, b, 0o600)
		var out, errb bytes.Buffer
		if code := episodeCmd([]string{"start", "--spec", p, "--config", cfgPath}, &out, &errb); code != 1 || !strings.Contains(errb.String(), c.want) {
			t.Fatalf("%s: exit %d: %s %s", name, code, out.String(), errb.String())
		}
	}
	if out := run(0, "list", "--config", cfgPath, "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("refused starts changed the store: %s", out)
	}

	startAt := time.Now()
	var started api.EpisodeView
	if err := json.Unmarshal([]byte(run(0, "start", "--spec", specPath, "--config", cfgPath, "--json")), &started); err != nil {
		t.Fatal(err)
	}
	t.Logf("episode start answered in %v", time.Since(startAt).Round(time.Millisecond))
	id := started.ID
	launcherID := id + "-g1"
	st, err := bed.Domains().Inspect(ctx, launcherID)
	if err != nil || !st.Exists {
		t.Fatalf("domain %s after start: %+v %v", launcherID, st, err)
	}

	var view api.EpisodeView
	if err := json.Unmarshal([]byte(run(0, "status", id, "--config", cfgPath, "--json")), &view); err != nil {
		t.Fatal(err)
	}
	if view.ID != id || view.State != "active" || view.Live == nil || view.Live.State != string(episode.Running) || view.Live.Generation != 1 {
		t.Fatalf("status after start: %+v live %+v", view, view.Live)
	}
	var recorded episode.Spec
	if err := json.Unmarshal(view.Spec, &recorded); err != nil || recorded.MaxRepairs != 1 {
		t.Fatalf("recorded spec: %v max_repairs %d, want the kernel's 1", err, recorded.MaxRepairs)
	}
	if out := run(0, "list", "--config", cfgPath); !strings.Contains(out, id) {
		t.Fatalf("list: %s", out)
	}

	// The worker has exited 0; its domain lives until the episode ends.
	if st, err := bed.Domains().Inspect(ctx, launcherID); err != nil || !st.Exists {
		t.Fatalf("domain %s before abort: %+v %v", launcherID, st, err)
	}
	abortAt := time.Now()
	if out := run(0, "abort", id, "--reason", "test done", "--config", cfgPath); !strings.Contains(out, "aborted") {
		t.Fatalf("abort: %s", out)
	}
	t.Logf("episode abort answered in %v", time.Since(abortAt).Round(time.Millisecond))
	if st, err := bed.Domains().Inspect(ctx, launcherID); err != nil || st.Exists || st.Processes != 0 {
		t.Fatalf("domain %s after abort: %+v %v", launcherID, st, err)
	}
	if _, err := os.Stat(filepath.Join(bed.Workspaces, id)); !os.IsNotExist(err) {
		t.Fatalf("workspace after abort: %v", err)
	}
	var ended api.EpisodeView // fresh: Unmarshal keeps fields a document omits
	if err := json.Unmarshal([]byte(run(0, "status", id, "--config", cfgPath, "--json")), &ended); err != nil || ended.State != "aborted" || ended.Live != nil {
		t.Fatalf("status after abort: %v %s live %+v", err, ended.State, ended.Live)
	}

	// A class 3 git_commit through the composed kernel: the worker
	// proposes its diff, evaluation runs verification (verify_argv in a
	// clean domain) and the sensor bank, and the commit lands with its
	// trailer.
	commitAt := time.Now()
	var cs map[string]any
	json.Unmarshal(spec, &cs)
	cs["origin_intent"] = "greet in greeting.txt"
	cs["argv"] = []string{"/bin/bash", "-c", commitWorker}
	commitSpec, _ := json.Marshal(cs)
	commitPath := filepath.Join(tmp, "commit.json")
	os.WriteFile(commitPath, commitSpec, 0o600)
	var committing api.EpisodeView
	if err := json.Unmarshal([]byte(run(0, "start", "--spec", commitPath, "--config", cfgPath, "--json")), &committing); err != nil {
		t.Fatal(err)
	}
	for testbed.Git(t, repo, "rev-parse", "refs/heads/main") == base {
		if ctx.Err() != nil {
			var effects bytes.Buffer
			effectCmd([]string{"list", committing.ID, "--config", cfgPath}, &effects, &effects)
			t.Fatalf("the class 3 commit never landed; effects:\n%s\n%s", effects.String(), logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	msg := testbed.Git(t, repo, "log", "-1", "--format=%B", "refs/heads/main")
	if !strings.Contains(msg, broker.TrailerKey+":") || !strings.Contains(msg, "say hello") {
		t.Fatalf("authoritative head message lacks the trailer:\n%s", msg)
	}
	if got := testbed.Git(t, repo, "show", "refs/heads/main:greeting.txt"); got != "hello" {
		t.Fatalf("greeting.txt at the authoritative head: %q", got)
	}
	// The ref moves before the outcome is recorded: wait for the record.
	var effects []api.EffectView
	for {
		var eb, ee bytes.Buffer
		if code := effectCmd([]string{"list", committing.ID, "--config", cfgPath, "--json"}, &eb, &ee); code != 0 {
			t.Fatalf("effect list: %s", ee.String())
		}
		err := json.Unmarshal(eb.Bytes(), &effects)
		if err == nil && len(effects) == 1 && effects[0].State == "committed" && effects[0].Class == 3 {
			break
		}
		if ctx.Err() != nil || err != nil || len(effects) != 1 || effects[0].State != "committing" {
			t.Fatalf("effects: %v %+v", err, effects)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var ev, evErr bytes.Buffer
	if code := eventsCmd([]string{"tail", committing.ID, "-n", "200", "--config", cfgPath, "--json"}, &ev, &evErr); code != 0 {
		t.Fatalf("events tail: %s", evErr.String())
	}
	for _, kind := range []string{"verification", "semantic"} {
		if !strings.Contains(ev.String(), `"kind":"`+kind+`"`) {
			t.Fatalf("no %s decision recorded before the commit:\n%s", kind, ev.String())
		}
	}
	t.Logf("class 3 commit landed %v after start", time.Since(commitAt).Round(time.Millisecond))
	run(0, "abort", committing.ID, "--reason", "test done", "--config", cfgPath)

	// A restarted kernel on the same state recovers (nothing to resume)
	// and serves again.
	if err := stop(); err != nil {
		t.Fatalf("serve stopped: %v", err)
	}
	startServe(t, ctx, cfg, log, logs, &owner)
	if out := run(0, "status", id, "--config", cfgPath); !strings.Contains(out, "aborted") {
		t.Fatalf("status after restart: %s", out)
	}
	t.Logf("whole test %v", time.Since(began).Round(time.Millisecond))
}

// commitWorker proposes a change to greeting.txt as a class 3 git_commit,
// evaluates and commits it.
const commitWorker = `
set -u
E=` + testbed.EffectClientPath + `
G="git -c safe.directory=* -c core.hooksPath=/dev/null"
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
cd /workspace
echo hello > greeting.txt
$G diff --binary > /tmp/p.patch || exit 1
base=$($G rev-parse HEAD)
p=$($E prepare -kind git_commit -target-id repo -target "{\"base_oid\":\"$base\",\"ref\":\"refs/heads/main\",\"message\":\"say hello\"}" -payload /tmp/p.patch) || { echo "PREPARE-FAILED $p"; exit 1; }
id=$(pick "$p" id); rev=$(pick "$p" revision)
$E evaluate -effect "$id" -revision "$rev" >/dev/null || { echo EVALUATE-FAILED; exit 1; }
c=$($E commit -effect "$id" -revision "$rev") || { echo "COMMIT-FAILED $c"; exit 1; }
echo "STATE=$(pick "$c" state)"
`

// waitLog waits for the kernel's log to contain want.
func waitLog(t *testing.T, logs *lockedBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log never showed %q:\n%s", want, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServe runs serve in-process until the returned stop (or the test's
// end) and returns once the API answers.
func startServe(t testing.TB, ctx context.Context, cfg *config.Config, log hclog.Logger, logs *lockedBuffer, owner *[2]int) func() error {
	t.Helper()
	stop, err := server.Start(ctx, cfg, log, server.Hooks{Owner: owner})
	if err != nil {
		t.Fatalf("serve: %v\n%s", err, logs)
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}
