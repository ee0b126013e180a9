package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// realRepo is one repository of testdata/repos (README.md there names its
// source and licence): its bundle's main is a commit that breaks a test.
type realRepo struct {
	name            string
	file, bug, fix  string // the line the break changed, and back
	test            string // how the agent runs the tests
	verify, setup   []string
	ignoredAfterRun string // what the tests or setup leave that the repository ignores
}

var realRepos = []realRepo{
	{name: "gjson", file: "gjson.go", bug: "\treturn t.Type != Null && len(t.Raw) != 0", fix: "\treturn t.Type != Null || len(t.Raw) != 0",
		test: "go test -mod=vendor ./...", verify: []string{"go", "test", "-mod=vendor", "./..."},
		setup: []string{"go", "mod", "vendor"}, ignoredAfterRun: "vendor"},
	{name: "is-number", file: "index.js", bug: "    return num === num;", fix: "    return num - num === 0;",
		test: "./node_modules/.bin/mocha", verify: []string{"./node_modules/.bin/mocha"},
		setup: []string{"npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--update-notifier=false"}, ignoredAfterRun: "node_modules"},
	{name: "six", file: "six.py", bug: `        return s.encode("utf-8")`, fix: `        return s.encode("latin-1")`,
		test: "python3 -m pytest -q test_six.py", verify: []string{"python3", "-m", "pytest", "-q", "test_six.py"}, ignoredAfterRun: ".pytest_cache"},
	{name: "jsmn", file: "jsmn.h", bug: "      parser->toksuper = parser->toknext;", fix: "      parser->toksuper = parser->toknext - 1;",
		test: "make test", verify: []string{"make", "test"}, ignoredAfterRun: "test/test_default"},
}

// TestRealRepositories is the main job on real open-source repositories
// in four ecosystems (testdata/repos: a Go module with third-party
// modules, a Node package tested with its mocha devDependency, a Python
// package tested with pytest from Debian, a C library built and tested
// with make; each leaves ignored output in its tree), every one on the dev
// environment (Debian packages), which `autonomic run` chooses for a
// target that names none. For each, the base breaks a test; the
// real Codex CLI, driven by a scripted fixture model, runs the tests,
// fixes the line, runs them again and exits; the harvest lands the fix —
// the ignored output left out — after verification ran the target's
// tests in a clean domain on the same environment (and the setup layer).
// A second run on the same lockfiles fetches nothing.
func TestRealRepositories(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	targets := map[string]any{}
	bases := map[string]string{}
	for _, r := range realRepos {
		bare := filepath.Join(tmp, r.name+".git")
		bundle, err := filepath.Abs("testdata/repos/" + r.name + ".bundle")
		if err != nil {
			t.Fatal(err)
		}
		testbed.Git(t, tmp, "clone", "-q", "--bare", bundle, bare)
		bases[r.name] = strings.TrimSpace(testbed.Git(t, bare, "rev-parse", "refs/heads/main"))
		testbed.Git(t, bare, "update-ref", "refs/heads/agent/codex", bases[r.name])
		tg := map[string]any{"repo": bare, "allowed_refs": []string{"refs/heads/agent/codex"}, "allowed_paths": []string{"**"},
			"verify_argv": r.verify, "class": 3}
		if r.setup != nil {
			tg["setup"] = r.setup
		}
		targets[r.name] = tg
	}
	rk := startRunKernel(t, ctx, runOptions{testDeps: true, targets: targets, dev: true})
	model := rk.models[fixturemodel.Responses]
	task := "Fix the failing test. Do not change the tests."
	for _, r := range realRepos {
		t.Run(r.name, func(t *testing.T) {
			bare := filepath.Join(tmp, r.name+".git")
			model.SetScript(fixturemodel.FixAndTest(r.file, r.bug, r.fix, r.test))
			run := func(base string) (episode string, fetches []string) {
				t.Helper()
				var out, errb bytes.Buffer
				began := time.Now()
				code := runCmd([]string{"--repo", bare, "--agent", "codex", "--config", rk.cfgPath, "--key", rk.key, "--wait", "15m", task}, &out, &errb)
				t.Logf("autonomic run: exit %d in %v\n%s%s", code, time.Since(began).Round(time.Millisecond), out.String(), errb.String())
				ep := regexp.MustCompile(`(?m)^episode ([0-9a-f-]{36}):`).FindStringSubmatch(out.String())
				landed := regexp.MustCompile(`(?m)^landed: refs/heads/agent/codex at ([0-9a-f]{40})`).FindStringSubmatch(out.String())
				if code != 0 || ep == nil || landed == nil {
					if ep != nil {
						for _, f := range rk.fetches(t, ctx, ep[1]) {
							t.Logf("egress: %s", f)
						}
					}
					for _, l := range strings.Split(rk.logs.String(), "\n") {
						if ep != nil && strings.Contains(l, ep[1]) && (strings.Contains(l, `"@level":"warn"`) || strings.Contains(l, "homeostat") || strings.Contains(l, "drift")) {
							t.Logf("kernel: %s", l)
						}
					}
					t.Fatalf("the run did not land")
				}
				// No target names an environment: dev is the run's default
				// where the launcher has it.
				if !strings.Contains(out.String(), "(rootfs dev, the default environment,") {
					t.Errorf("the run did not choose the dev environment by default")
				}
				if parent := strings.TrimSpace(testbed.Git(t, bare, "rev-parse", landed[1]+"^")); parent != base {
					t.Errorf("landed on %s, want the base %s", parent, base)
				}
				if files := strings.Fields(testbed.Git(t, bare, "diff", "--name-only", base, landed[1])); len(files) != 1 || files[0] != r.file {
					t.Errorf("the commit changes %v, want only %s", files, r.file)
				}
				if got := testbed.Git(t, bare, "show", landed[1]+":"+r.file); !strings.Contains(got, r.fix+"\n") || strings.Contains(got, r.bug+"\n") {
					t.Errorf("the landed %s lacks the fix", r.file)
				}
				if !strings.Contains(out.String(), "decision on effect") || !strings.Contains(out.String(), "allow by verification") {
					t.Errorf("no verification allowed the change")
				}
				if !strings.Contains(out.String(), "ignored by the repository's ignore rules") || !strings.Contains(out.String(), r.ignoredAfterRun) {
					t.Errorf("the run left no %s the repository ignores", r.ignoredAfterRun)
				}
				return ep[1], rk.fetches(t, ctx, ep[1])
			}
			_, first := run(bases[r.name])
			for _, f := range first {
				t.Logf("first run egress: %s", f)
				// npm ci's parallel tunnels may fill the proxy's slots: a
				// 503 it retries (backpressure, no drift), nothing refused.
				if strings.Contains(f, " refused ") && !strings.Contains(f, " effect_broker_saturated ") {
					t.Errorf("refused: %s", f)
				}
			}
			if r.setup != nil && len(first) == 0 {
				t.Errorf("the first run's setup fetched nothing")
			}
			// The same lockfiles, another base: the fix undone on top of
			// the landed one.
			work := filepath.Join(t.TempDir(), "w")
			testbed.Git(t, filepath.Dir(work), "clone", "-q", "-b", "agent/codex", bare, work)
			b, err := os.ReadFile(filepath.Join(work, r.file))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(work, r.file), bytes.Replace(b, []byte(r.fix+"\n"), []byte(r.bug+"\n"), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			testbed.Git(t, work, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qam", "break it again")
			testbed.Git(t, work, "push", "-q", bare, "HEAD:refs/heads/agent/codex")
			_, second := run(strings.TrimSpace(testbed.Git(t, work, "rev-parse", "HEAD")))
			if len(second) != 0 {
				t.Errorf("the second run on the same lockfiles fetched: %v", second)
			}
			for _, l := range strings.Split(rk.logs.String(), "\n") {
				if strings.Contains(l, `"setup layer`) && strings.Contains(l, bare) {
					t.Logf("kernel: %s", l)
				}
			}
		})
	}
}
