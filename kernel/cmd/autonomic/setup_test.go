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

// layeredMakefile runs the Node test against the node_modules the setup
// left in the tree: without the layer, is-number is not there and the
// test fails, in the agent's domain and in verification alike.
const layeredMakefile = `test:
	sh tests/test_calc.sh
	node tests/calc.test.js
`

// TestSetupLayerCachedByLockfiles is a target's setup phase through
// `autonomic run`: target calc names setup `npm ci`; its repository
// ignores node_modules and its tests need is-number from there. The
// first run sets up in a domain through the episode's egress proxy (the
// tarball in its fetch ledger), Codex runs make test on the layer, fixes
// src/calc.sh and verification runs make test on the same layer: the fix
// lands without node_modules. A second run on another commit with the
// same lockfile starts from the kept layer: its ledger has no fetch at
// all, and it lands. A third, whose lockfile's bytes changed, sets up
// again.
func TestSetupLayerCachedByLockfiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	rk := startRunKernel(t, ctx, runOptions{testDeps: true,
		setup: []string{"npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--update-notifier=false", "--loglevel=error"}})
	work := filepath.Join(t.TempDir(), "w")
	testbed.Git(t, filepath.Dir(work), "clone", "-q", rk.repo, work)
	deps := "../../../scripts/demo/deps/"
	for from, to := range map[string]string{"package.json": "package.json", "package-lock.json": "package-lock.json", "tests/calc.test.js": "tests/calc.test.js"} {
		b, err := os.ReadFile(deps + from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("Makefile", layeredMakefile)
	write(".gitignore", "node_modules/\n")
	commit := func(msg string) string {
		t.Helper()
		testbed.Git(t, work, "add", "-A")
		testbed.Git(t, work, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", msg)
		testbed.Git(t, work, "push", "-q", "--force", rk.repo, "HEAD:refs/heads/agent/codex")
		return strings.TrimSpace(testbed.Git(t, work, "rev-parse", "HEAD"))
	}
	const tarball = "registry.npmjs.org /is-number/-/is-number-7.0.0.tgz"
	// run lands a fix on base, and returns its episode's fetch ledger.
	run := func(base string) []string {
		t.Helper()
		var out, errb bytes.Buffer
		code := runCmd([]string{"--repo", rk.repo, "--agent", "codex", "--config", rk.cfgPath, "--key", rk.key, "--wait", "8m",
			"Fix the failing test: src/calc.sh adds one too many. Do not change the tests."}, &out, &errb)
		t.Logf("autonomic run: exit %d\n%s%s", code, out.String(), errb.String())
		ep := regexp.MustCompile(`(?m)^episode ([0-9a-f-]{36}):`).FindStringSubmatch(out.String())
		landed := regexp.MustCompile(`(?m)^landed: refs/heads/agent/codex at ([0-9a-f]{40})`).FindStringSubmatch(out.String())
		if code != 0 || ep == nil || landed == nil {
			t.Fatalf("the run did not land")
		}
		if parent := strings.TrimSpace(testbed.Git(t, rk.repo, "rev-parse", landed[1]+"^")); parent != base {
			t.Errorf("landed on %s, want %s", parent, base)
		}
		// node_modules is ignored: the setup's output is no part of the change.
		if files := strings.Fields(testbed.Git(t, rk.repo, "diff", "--name-only", base, landed[1])); len(files) != 1 || files[0] != fixturemodel.CalcFile {
			t.Errorf("the commit changes %v, want only %s", files, fixturemodel.CalcFile)
		}
		testbed.Git(t, work, "fetch", "-q", rk.repo, "refs/heads/agent/codex")
		testbed.Git(t, work, "reset", "-q", "--hard", "FETCH_HEAD")
		fetches := rk.fetches(t, ctx, ep[1])
		for _, f := range fetches {
			t.Logf("egress: %s", f)
			if strings.Contains(f, " refused ") {
				t.Errorf("refused: %s", f)
			}
		}
		return fetches
	}
	rebreak := func(msg string) string {
		t.Helper()
		calc := filepath.Join(work, fixturemodel.CalcFile)
		b, err := os.ReadFile(calc)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(calc, bytes.Replace(b, []byte(fixturemodel.CalcFix), []byte(fixturemodel.CalcBug), 1), 0o755); err != nil {
			t.Fatal(err)
		}
		return commit(msg)
	}
	has := func(fetches []string, s string) bool {
		for _, f := range fetches {
			if strings.Contains(f, s) {
				return true
			}
		}
		return false
	}

	first := run(commit("tests need is-number from node_modules"))
	if !has(first, tarball) {
		t.Errorf("the first run's setup did not fetch %s through the proxy: %v", tarball, first)
	}
	if n := strings.Count(rk.logs.String(), `"setup layer made"`); n != 1 {
		t.Errorf("%d layers made after the first run, want 1", n)
	}

	write("README.md", "calc, with a Node test\n")
	second := run(rebreak("calc adds one too many again"))
	if len(second) != 0 {
		t.Errorf("the second run, same lockfile, fetched: %v", second)
	}
	if n := strings.Count(rk.logs.String(), `"setup layer reused"`); n != 1 {
		t.Errorf("the layer was reused %d times, want once", n)
	}

	lock, err := os.ReadFile(filepath.Join(work, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	write("package-lock.json", string(lock)+"\n")
	third := run(rebreak("the lockfile's bytes change"))
	if !has(third, tarball) {
		t.Errorf("the third run, a new lockfile, did not set up again: %v", third)
	}
	if n := strings.Count(rk.logs.String(), `"setup layer made"`); n != 2 {
		t.Errorf("%d layers made after the third run, want 2", n)
	}
}
