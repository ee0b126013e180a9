package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/jackc/pgx/v5"

	agent "github.com/autonomic-kernel/autonomic/agents"
	"github.com/autonomic-kernel/autonomic/gates/scenario"
	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/rootfs-builder"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// agentsRootfs is the agents rootfs (rootfs-builder/specs/agents.json)
// with this tree's autonomic-entry, from the builder's content-addressed
// cache: built once (npm, ~1.5 min), verified after.
func agentsRootfs(t testing.TB, ctx context.Context, bed *testbed.Bed) (string, string) {
	return cachedRootfs(t, ctx, bed, "agents")
}

// devRootfs is the dev environment (rootfs-builder/specs/dev.json: Debian
// packages by mmdebstrap, the agent CLIs on top) with this tree's
// autonomic-entry, from the builder's cache: built once (~2.5 min),
// verified after.
func devRootfs(t testing.TB, ctx context.Context, bed *testbed.Bed) (string, string) {
	return cachedRootfs(t, ctx, bed, "dev")
}

// cachedRootfs builds (once per test binary) rootfs-builder/specs/NAME.json
// with this tree's autonomic-entry into the builder's cache.
func cachedRootfs(t testing.TB, ctx context.Context, bed *testbed.Bed, name string) (string, string) {
	t.Helper()
	builtMu.Lock()
	b := built[name]
	if b == nil {
		b = &builtRootfs{}
		built[name] = b
	}
	builtMu.Unlock()
	b.once.Do(func() {
		// The effect client and the entry, added as install.sh adds them
		// (built alike, the same bytes): the test finds the entries an
		// install made, and an install the tests'.
		effect, err := bed.Static(ctx, "./broker/cmd/autonomic-effect")
		if err != nil {
			b.err = err
			return
		}
		entry, err := bed.Static(ctx, "./entry/cmd/autonomic-entry")
		if err != nil {
			b.err = err
			return
		}
		mod, _ := testbed.ModuleRoot()
		spec, err := rootfs.LoadSpec(filepath.Join(mod, "rootfs-builder/specs", name+".json"))
		if err != nil {
			b.err = err
			return
		}
		start := time.Now()
		var hit bool
		b.dir, b.digest, hit, b.err = rootfs.BuildCached(ctx, spec, "", rootfs.Options{Add: []rootfs.Add{
			{Src: effect, Dest: "/usr/local/bin/autonomic-effect"}, {Src: entry, Dest: agent.EntryPath}}})
		t.Logf("%s rootfs %s cached=%v in %v", name, b.dir, hit, time.Since(start).Round(time.Millisecond))
	})
	if b.err != nil {
		t.Fatalf("%s rootfs: %v", name, b.err)
	}
	return b.dir, b.digest
}

type builtRootfs struct {
	once        sync.Once
	dir, digest string
	err         error
}

var (
	builtMu sync.Mutex
	built   = map[string]*builtRootfs{}
)

// runKernel is a kernel serving the reference repository as target
// "calc", with a fixture provider per wire API and the agents rootfs.
type runKernel struct {
	cfgPath, repo, base, key string
	dbURL                    string                          // the kernel's database, to read its ledger
	models                   map[string]*fixturemodel.Server // by wire API
	logs                     *lockedBuffer
}

// providerKey is the provider credential only the kernel holds.
const providerKeyEnv, providerKey = "AUTONOMIC_TEST_PROVIDER_KEY", "sk-kernel-held-5e2a9f"

// runOptions vary the run kernel: testDeps serves Codex the script that
// runs make test after its fix and lets the registries' reserved
// addresses here through (egress.allowed_nets).
// setup is the target's setup command (its layer cached by lockfiles);
// targets are more git_commit targets, by id; dev names the dev rootfs.
type runOptions struct {
	testDeps bool
	setup    []string
	targets  map[string]any
	dev      bool
}

func startRunKernel(t testing.TB, ctx context.Context, opts ...runOptions) *runKernel {
	t.Helper()
	var o runOptions
	for _, x := range opts {
		o = x
	}
	privileged.Require(t)
	bed, err := testbed.New(ctx, testbed.Options{Spec: "rootfs-builder/specs/worker.json", EffectClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			bed.RemoveCgroups()
			return
		}
		_ = bed.Close()
	})
	dir, digest := agentsRootfs(t, ctx, bed)
	if err := bed.NameRootfs("agents", dir, digest); err != nil {
		t.Fatal(err)
	}
	if o.dev {
		dir, digest := devRootfs(t, ctx, bed)
		if err := bed.NameRootfs("dev", dir, digest); err != nil {
			t.Fatal(err)
		}
	}
	tmp, err := os.MkdirTemp("", "autonomic-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	cluster := storetest.Start(t)
	if err := cluster.CreateDatabase(ctx, "kernel"); err != nil {
		t.Fatal(err)
	}
	rk := &runKernel{repo: filepath.Join(tmp, "calc.git"), models: map[string]*fixturemodel.Server{}, logs: &lockedBuffer{},
		dbURL: cluster.AdminConnString("kernel")}
	if rk.base, err = scenario.Seed(ctx, rk.repo); err != nil {
		t.Fatal(err)
	}
	// Each agent's change lands on its own ref, which starts at the base.
	for _, name := range agent.Names() {
		testbed.Git(t, rk.repo, "update-ref", "refs/heads/agent/"+name, rk.base)
	}
	t.Setenv(providerKeyEnv, providerKey)
	providers := map[string]any{}
	for _, wire := range []string{fixturemodel.Responses, fixturemodel.Messages, fixturemodel.Chat} {
		script := fixturemodel.FixCalc(wire, "/workspace")
		if o.testDeps && wire == fixturemodel.Responses {
			script = fixturemodel.FixCalcAndTest("/workspace")
		}
		// Several runs on one model: each conversation has its own turns.
		script.PerConversation = o.setup != nil
		m, err := fixturemodel.Start(script)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		rk.models[wire] = m
		var models []string
		prices := map[string]any{}
		for _, name := range agent.Names() {
			p, _ := agent.Load(name)
			if p.WireAPI == wire {
				models = append(models, p.Model)
				prices[p.Model] = map[string]any{"input_micro_usd_per_mtok": 1_000_000, "output_micro_usd_per_mtok": 4_000_000}
			}
		}
		providers["fixture-"+wire] = map[string]any{"wire_api": wire, "upstream": m.URL, "credential_env": providerKeyEnv,
			"models": models, "prices": prices}
	}
	// The operator's key, made on first use by the command itself.
	rk.key = filepath.Join(tmp, "operator", "operator.pem")
	key, err := loadOrMakeKey(rk.key)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(testbed.CgroupV2Mount(), bed.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]any{"calc": map[string]any{"repo": rk.repo,
		"allowed_refs":  []string{"refs/heads/agent/codex", "refs/heads/agent/claude", "refs/heads/agent/opencode"},
		"allowed_paths": []string{"src/**", "README.md", "Makefile"}, "forbidden_paths": []string{".env", "config/**", "tests/**"},
		"verify_argv": []string{"make", "test"}, "class": 3, "setup": o.setup}}
	for id, tg := range o.targets {
		targets[id] = tg
	}
	doc, _ := json.Marshal(map[string]any{
		"policy_keys": map[string]string{key.keyID: key.pub},
		"state_dir":   filepath.Join(tmp, "state"),
		"store":       map[string]any{"url": cluster.KernelConnString("kernel"), "admin_url": cluster.AdminConnString("kernel")},
		"domain": map[string]any{"backend": "linux", "launcher_path": bed.Launcher, "direct": true,
			"workspaces_root": bed.Workspaces, "sockets_root": bed.Sockets, "cgroup_parent": "/" + rel},
		"sensor":                 map[string]any{"kind": "rules"},
		"targets":                map[string]any{"git_commit": targets},
		"automatic_verification": true,
		"max_repairs":            1,
		"regulator":              map[string]any{"start_level": "act"},
		"inference":              map[string]any{"providers": providers},
		"episode":                map[string]any{"checkpoints_dir": filepath.Join(bed.State, "checkpoints")},
		"api":                    map[string]any{"socket": filepath.Join(tmp, "api.sock")},
		"egress":                 map[string]any{"allowed_nets": siteNets(t, o.testDeps)},
	})
	rk.cfgPath = filepath.Join(tmp, "autonomic.json")
	if err := os.WriteFile(rk.cfgPath, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(rk.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "autonomic", Output: rk.logs, JSONFormat: true, Level: hclog.Info})
	startServe(t, ctx, cfg, log, rk.logs, &[2]int{bed.OwnerUID, bed.OwnerGID})
	return rk
}

// TestRunLandsEachAgentsFix is the main job through the command: for each
// shipped agent, `autonomic run --repo --agent TASK` against a running
// kernel starts the agent CLI for real in a domain on the agents rootfs,
// driven through its relay by a fixture model speaking its wire API; the
// agent edits src/calc.sh knowing nothing of effects, the harvest lands
// the change on refs/heads/agent/<name> through the horizon (verification
// included), and the command streams the timeline and ends with the
// branch and commit. The provider saw only its inference route, always
// with the kernel's key; the timeline holds every call.
func TestRunLandsEachAgentsFix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	rk := startRunKernel(t, ctx)
	task := "Fix the failing test: src/calc.sh adds one too many. Do not change the tests."
	for _, name := range agent.Names() {
		t.Run(name, func(t *testing.T) {
			p, err := agent.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			m := rk.models[p.WireAPI]
			var out, errb bytes.Buffer
			began := time.Now()
			code := runCmd([]string{"--repo", rk.repo, "--agent", name, "--config", rk.cfgPath, "--key", rk.key, "--wait", "8m", task}, &out, &errb)
			t.Logf("autonomic run --agent %s: exit %d in %v\n%s%s", name, code, time.Since(began).Round(time.Millisecond), out.String(), errb.String())
			// The agent ran with the egress bridge and HTTPS_PROXY: its own
			// background calls (its profile's own_hosts) never reached the
			// proxy as refusals.
			ep := regexp.MustCompile(`(?m)^episode ([0-9a-f-]{36}):`).FindStringSubmatch(out.String())
			if ep == nil {
				t.Fatal("the command named no episode")
			}
			// This launcher has no dev environment: the profile's rootfs.
			if !strings.Contains(out.String(), "(rootfs "+p.Rootfs+", wall time") {
				t.Errorf("the run did not fall back to the profile's rootfs %s", p.Rootfs)
			}
			for _, f := range rk.fetches(t, ctx, ep[1]) {
				t.Logf("egress: %s", f)
				if strings.Contains(f, " refused ") {
					t.Errorf("the agent's episode had a refused fetch: %s", f)
				}
			}
			ref := "refs/heads/agent/" + name
			landed := regexp.MustCompile(`(?m)^landed: ` + regexp.QuoteMeta(ref) + ` at ([0-9a-f]{40}) \(effect [0-9a-f-]{36}\)$`).FindStringSubmatch(out.String())
			if code != 0 || landed == nil {
				t.Fatalf("the run did not end landed on %s", ref)
			}
			if head := strings.TrimSpace(testbed.Git(t, rk.repo, "rev-parse", ref)); head != landed[1] {
				t.Errorf("%s is %s, the command said %s", ref, head, landed[1])
			}
			if parent := strings.TrimSpace(testbed.Git(t, rk.repo, "rev-parse", ref+"^")); parent != rk.base {
				t.Errorf("the commit's parent is %s, want the base %s", parent, rk.base)
			}
			calc := testbed.Git(t, rk.repo, "show", ref+":"+fixturemodel.CalcFile)
			if !strings.Contains(calc, fixturemodel.CalcFix) || strings.Contains(calc, fixturemodel.CalcBug) {
				t.Errorf("landed src/calc.sh:\n%s", calc)
			}
			if files := strings.Fields(testbed.Git(t, rk.repo, "diff", "--name-only", rk.base, ref)); len(files) != 1 || files[0] != fixturemodel.CalcFile {
				t.Errorf("the commit changes %v, want only %s", files, fixturemodel.CalcFile)
			}
			reqs := m.Requests()
			if len(reqs) == 0 {
				t.Fatal("the fixture model saw no request")
			}
			for _, q := range reqs {
				if q.Method != "POST" || q.Path != fixturemodel.Routes[p.WireAPI] {
					t.Errorf("the provider saw %s %s", q.Method, q.Path)
				}
				got := q.Header.Get("Authorization")
				want := "Bearer " + providerKey
				if p.WireAPI == fixturemodel.Messages {
					got, want = q.Header.Get("X-Api-Key"), providerKey
				}
				if got != want {
					t.Errorf("the provider got credential %q, want the kernel's", got)
				}
			}
			if n := strings.Count(out.String(), " model call "); n != len(reqs) {
				t.Errorf("the timeline shows %d inference calls, the provider saw %d", n, len(reqs))
			}
		})
	}
}

// siteNets is what the demo puts in egress.allowed_nets (autonomic egress
// nets): the registries' addresses here that pinning refuses by default.
func siteNets(t testing.TB, want bool) []string {
	if !want {
		return []string{}
	}
	var out, errb bytes.Buffer
	if code := egressCmd([]string{"nets"}, &out, &errb); code != 0 {
		t.Fatalf("egress nets: %d %s", code, errb.String())
	}
	t.Logf("egress nets: %q %s", out.String(), errb.String())
	return append([]string{}, strings.Fields(out.String())...)
}

// TestRunFetchesTheTestsDependency is the demo's main job: the reference
// repository plus scripts/demo/deps (a Node test that needs is-number from
// the npm registry). Codex fixes src/calc.sh and runs make test: npm
// fetches the dependency through the episode's egress proxy; automatic
// verification runs make test again in its own domain, through its own
// proxy, and the tarball comes from the host's cache. The fix lands, and
// the ledger shows both fetches and no refusal.
func TestRunFetchesTheTestsDependency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rk := startRunKernel(t, ctx, runOptions{testDeps: true})
	work := filepath.Join(t.TempDir(), "w")
	testbed.Git(t, filepath.Dir(work), "clone", "-q", rk.repo, work)
	// As demo.sh does: scripts/demo/deps over the base (its Makefile replaces the base's).
	deps := os.DirFS("../../../scripts/demo/deps")
	if err := fs.WalkDir(deps, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(deps, p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(work, p), b, 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	testbed.Git(t, work, "add", "-A")
	testbed.Git(t, work, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "tests need is-number")
	base := strings.TrimSpace(testbed.Git(t, work, "rev-parse", "HEAD"))
	testbed.Git(t, work, "push", "-q", "--force", rk.repo, "HEAD:refs/heads/agent/codex")

	var out, errb bytes.Buffer
	code := runCmd([]string{"--repo", rk.repo, "--agent", "codex", "--config", rk.cfgPath, "--key", rk.key, "--wait", "8m",
		"Fix the failing test: src/calc.sh adds one too many. Do not change the tests."}, &out, &errb)
	t.Logf("autonomic run: exit %d\n%s%s", code, out.String(), errb.String())
	ep := regexp.MustCompile(`(?m)^episode ([0-9a-f-]{36}):`).FindStringSubmatch(out.String())
	if ep == nil {
		t.Fatal("the command named no episode")
	}
	const tarball = "registry.npmjs.org /is-number/-/is-number-7.0.0.tgz"
	var got []string
	for _, f := range rk.fetches(t, ctx, ep[1]) {
		t.Logf("egress: %s", f)
		if strings.Contains(f, " refused ") {
			t.Errorf("refused: %s", f)
		}
		if strings.Contains(f, tarball+" fetched  200 ") || strings.Contains(f, tarball+" cached  200 ") {
			got = append(got, strings.Fields(f)[4])
		}
	}
	if len(got) != 2 || got[1] != "cached" {
		t.Errorf("the tarball's fetches were %v, want the worker's then the verification's from the cache", got)
	}
	// What the demo prints: the ledger through the API.
	var led, lerr bytes.Buffer
	if code := eventsCmd([]string{"egress", ep[1], "--config", rk.cfgPath}, &led, &lerr); code != 0 ||
		!strings.Contains(led.String(), "cached  GET  registry.npmjs.org/is-number/-/is-number-7.0.0.tgz  200  3730 bytes  sha256 ") {
		t.Errorf("autonomic events egress: exit %d\n%s%s", code, led.String(), lerr.String())
	}
	landed := regexp.MustCompile(`(?m)^landed: refs/heads/agent/codex at ([0-9a-f]{40})`).FindStringSubmatch(out.String())
	if code != 0 || landed == nil {
		t.Fatalf("the run did not land")
	}
	if parent := strings.TrimSpace(testbed.Git(t, rk.repo, "rev-parse", landed[1]+"^")); parent != base {
		t.Errorf("landed on %s, want the deps commit %s", parent, base)
	}
	if files := strings.Fields(testbed.Git(t, rk.repo, "diff", "--name-only", base, landed[1])); len(files) != 1 || files[0] != fixturemodel.CalcFile {
		t.Errorf("the commit changes %v, want only %s (make test left nothing in the tree)", files, fixturemodel.CalcFile)
	}
}

// fetches are the episode's egress ledger rows, one line each:
// "kind method host path outcome code status bytes".
func (rk *runKernel) fetches(t *testing.T, ctx context.Context, episode string) []string {
	t.Helper()
	conn, err := pgx.Connect(ctx, rk.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT kind || ' ' || method || ' ' || host || ' ' || path || ' ' || outcome || ' ' ||
		code || ' ' || status || ' ' || bytes FROM egress_fetches WHERE episode_id = $1 ORDER BY id`, episode)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRunRefusesWhatTheKernelCannotTake: a key the kernel does not know is
// made on first use and refused with how to register it; a repository
// that is no target, and a ref the target does not allow, are usage
// errors; nothing starts.
func TestRunRefusesWhatTheKernelCannotTake(t *testing.T) {
	tmp := t.TempDir()
	repo, _ := testbed.BareRepo(t, tmp, "r.git", map[string]string{"a": "a\n"}, "base")
	cfgPath := filepath.Join(tmp, "autonomic.json")
	cfg := func(keys map[string]string) []byte {
		doc, _ := json.Marshal(map[string]any{"state_dir": filepath.Join(tmp, "state"), "store": map[string]any{"url": "postgres://x@127.0.0.1:1/x"},
			"domain": map[string]any{"backend": "unsafe_local"}, "sensor": map[string]any{"kind": "rules"}, "policy_keys": keys,
			"targets": map[string]any{"git_commit": map[string]any{"r": map[string]any{"repo": repo, "allowed_paths": []string{"**"},
				"allowed_refs": []string{"refs/heads/agent/codex", "refs/heads/main"}}}},
			"api": map[string]any{"socket": filepath.Join(tmp, "api.sock")}})
		return doc
	}
	doc := cfg(map[string]string{})
	if err := os.WriteFile(cfgPath, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(tmp, "k", "operator.pem")
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := runCmd(append([]string{"--config", cfgPath, "--key", key}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	code, out := run("--repo", repo, "--agent", "codex", "fix it")
	if code != 2 || !strings.Contains(out, "made at "+key) || !strings.Contains(out, "does not know operator key") || !strings.Contains(out, "policy_keys") {
		t.Errorf("unknown key: exit %d\n%s", code, out)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key file: %v %v", fi, err)
	}
	k, _ := loadOrMakeKey(key)
	os.WriteFile(cfgPath, cfg(map[string]string{k.keyID: k.pub}), 0o600)
	other, _ := testbed.BareRepo(t, tmp, "other.git", map[string]string{"a": "a\n"}, "base")
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"not a target":    {[]string{"--repo", other, "--agent", "codex", "x"}, "is not a git_commit target"},
		"ref not allowed": {[]string{"--repo", repo, "--agent", "codex", "--ref", "refs/heads/x", "x"}, "not among the target's allowed_refs"},
		"ref missing":     {[]string{"--repo", repo, "--agent", "codex", "x"}, "create refs/heads/agent/codex at the commit"},
		"no provider":     {[]string{"--repo", repo, "--agent", "codex", "--ref", "refs/heads/main", "x"}, `no provider in inference.providers speaks its wire API "responses"`},
		"unknown agent":   {[]string{"--repo", repo, "--agent", "aider", "--ref", "refs/heads/main", "x"}, `no such profile: "aider" (have `},
	} {
		if code, out := run(c.args...); code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want 2 and %q\n%s", name, code, c.want, out)
		}
	}
}
