package verify

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestVerificationUsesBaseTestInputs: verify_argv (make test) runs the
// base's tests and build files, whatever the change did to them. A
// change that fixes nothing but adds a GNUmakefile (read before
// Makefile) or a makefile whose test rule passes, or rewrites the test,
// is denied, and the decision names what was put back; the honest fix
// passes; a target that lifts the rule (verify_change_inputs) runs the
// change's own.
func TestVerificationUsesBaseTestInputs(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is required (provision installs it)")
	}
	dir := t.TempDir()
	git := gitIn(t, dir)
	git("init", "-q", "-b", "main")
	for p, c := range map[string]string{"a.txt": "one\n", "Makefile": "test:\n\tsh tests/check.sh\n", "tests/check.sh": "grep -qx two a.txt\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644)
	}
	git("add", ".")
	git("commit", "-q", "-m", "base")
	base := git("rev-parse", "HEAD")
	// patch makes a change in a scratch copy and returns its diff.
	patch := func(files map[string]string) []byte {
		git("checkout", "-q", "-B", "scratch", base)
		for p, c := range files {
			os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
			os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644)
		}
		git("add", "-A")
		d := git("diff", "--cached", "--binary") + "\n"
		git("reset", "-q", "--hard")
		git("checkout", "-q", "main")
		return []byte(d)
	}
	root := t.TempDir()
	r := &Runner{Domains: &domain.UnsafeLocal{WorkspacesRoot: root}, WorkspacesRoot: root, OwnerUID: os.Geteuid(), OwnerGID: os.Getegid(),
		Targets: map[string]Target{
			"repo":   {Repo: dir, Argv: []string{"make", "-s", "test"}},
			"lifted": {Repo: dir, Argv: []string{"make", "-s", "test"}, ChangeInputs: true},
		}}
	verify := func(target string, p []byte) (string, Body) {
		t.Helper()
		e := store.Effect{ID: uuid.New(), Revision: 1, Epoch: 1, Kind: "git_commit", TargetID: target,
			Target: json.RawMessage(`{"base_oid":"` + base + `","ref":"refs/heads/main","message":"m"}`)}
		verdict, body, err := r.Verify(context.Background(), e, p)
		if err != nil {
			t.Fatal(err)
		}
		var b Body
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatal(err)
		}
		return verdict, b
	}
	pass := "test:\n\t@echo all tests pass\n"
	for name, c := range map[string]struct {
		files    map[string]string
		restored string
	}{
		"GNUmakefile":     {map[string]string{"GNUmakefile": pass}, "GNUmakefile"},
		"makefile":        {map[string]string{"makefile": pass}, "makefile"},
		"Makefile edited": {map[string]string{"Makefile": pass}, "Makefile"},
		"test rewritten":  {map[string]string{"tests/check.sh": "exit 0\n"}, "tests/check.sh"},
		"included .mk":    {map[string]string{"Makefile": "include x.mk\n", "x.mk": pass}, "x.mk"},
	} {
		t.Run(name, func(t *testing.T) {
			verdict, b := verify("repo", patch(c.files))
			if verdict != store.VerdictDeny || !slices.Contains(b.BaseInputs, c.restored) || b.BaseInputCount != len(b.BaseInputs) {
				t.Fatalf("a change that only rewrites its checks: %s, %+v", verdict, b)
			}
		})
	}
	if verdict, b := verify("repo", patch(map[string]string{"a.txt": "two\n"})); verdict != store.VerdictAllow || b.BaseInputCount != 0 {
		t.Fatalf("the honest fix: %s %+v", verdict, b)
	}
	// A fix with a new test of its own still passes: the base's tests run.
	if verdict, b := verify("repo", patch(map[string]string{"a.txt": "two\n", "tests/new_test.sh": "exit 1\n"})); verdict != store.VerdictAllow || !slices.Contains(b.BaseInputs, "tests/new_test.sh") {
		t.Fatalf("a fix with its own test: %s %+v", verdict, b)
	}
	if verdict, b := verify("lifted", patch(map[string]string{"GNUmakefile": pass})); verdict != store.VerdictAllow || b.BaseInputCount != 0 {
		t.Fatalf("on a target that lifts the rule, the change's own make file runs: %s %+v", verdict, b)
	}
}

func TestIsVerificationInput(t *testing.T) {
	for p, want := range map[string]bool{
		"Makefile": true, "sub/GNUmakefile": true, "MAKEFILE": true, "rules.mk": true, "package.json": true, "web/package.json": true,
		"conftest.py": true, "pyproject.toml": true, "go.mod": true, "x/y_test.go": true, "tests/a.sh": true, "src/__tests__/a.js": true,
		"a.test.ts": true, "test_calc.py": true, "src/calc.sh": false, "README.md": false, "src/testing.go": false, "go.sum": false,
	} {
		if IsVerificationInput(p) != want {
			t.Errorf("%s: %v", p, !want)
		}
	}
}
