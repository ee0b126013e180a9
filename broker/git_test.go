package broker

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// gitFixture is an authoritative bare repository and a scratch clone the
// "worker" makes patches in.
type gitFixture struct {
	t      testing.TB
	bare   string
	work   string
	marker string // a hook writes here if it ever runs
}

func sh(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func newGitFixture(t testing.TB) *gitFixture {
	d := t.TempDir()
	f := &gitFixture{t: t, bare: filepath.Join(d, "auth.git"), work: filepath.Join(d, "work"), marker: filepath.Join(d, "hook-ran")}
	sh(t, d, "git", "init", "-q", "-b", "main", f.work)
	for name, body := range map[string]string{"lib/auth.go": "package lib\n\nfunc Check() bool { return false }\n",
		"test/auth_test.go": "package test\n", ".env": "SECRET=1\n", "README": "hello\n"} {
		p := filepath.Join(f.work, name)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sh(t, f.work, "git", "add", "-A")
	sh(t, f.work, "git", "commit", "-q", "-m", "base")
	sh(t, d, "git", "clone", "-q", "--bare", f.work, f.bare)
	// Hooks that would betray execution: the adapter must never run them.
	for _, h := range []string{"reference-transaction", "post-update", "pre-commit", "post-commit", "update"} {
		hook := filepath.Join(f.bare, "hooks", h)
		if err := os.WriteFile(hook, []byte("#!/bin/sh\necho "+h+" >> "+f.marker+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *gitFixture) head() string { return sh(f.t, f.bare, "git", "rev-parse", "refs/heads/main") }

// patch edits files in the scratch clone and returns the binary diff.
func (f *gitFixture) patch(edit func(dir string)) []byte {
	sh(f.t, f.work, "git", "reset", "-q", "--hard")
	sh(f.t, f.work, "git", "clean", "-qfdx")
	edit(f.work)
	sh(f.t, f.work, "git", "add", "-A")
	return []byte(sh(f.t, f.work, "git", "diff", "--cached", "--binary") + "\n")
}

// moveRef commits something unrelated on main, as another writer would.
func (f *gitFixture) moveRef() string {
	tmp := f.t.TempDir()
	sh(f.t, tmp, "git", "clone", "-q", f.bare, "c")
	c := filepath.Join(tmp, "c")
	_ = os.WriteFile(filepath.Join(c, "README"), []byte("someone else "+tmp+"\n"), 0o644)
	sh(f.t, c, "git", "commit", "-qam", "unrelated")
	sh(f.t, c, "git", "-c", "core.hooksPath=/dev/null", "push", "-q", "origin", "main")
	return f.head()
}

func gitEnv(t *testing.T, f *gitFixture, g **GitCommit) *env {
	return newEnv(t, func(e *env, cfg *Config) {
		gc := &GitCommit{Targets: map[string]GitTarget{"repo": {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"},
			AllowedPaths: []string{"lib/**", "README"}, ForbiddenPaths: []string{"test/**", ".env", "**/*secret*"}}}}
		if g != nil {
			*g = gc
		}
		cfg.Adapters = append(cfg.Adapters, gc)
	})
}

func gitTarget(base string) map[string]string {
	return map[string]string{"base_oid": base, "ref": "refs/heads/main", "message": "fix auth check"}
}

func fixAuth(dir string) {
	_ = os.WriteFile(filepath.Join(dir, "lib/auth.go"), []byte("package lib\n\nfunc Check() bool { return true }\n"), 0o644)
}

// TestGitAuthoritativeCommitReconciliation is the
// git_authoritative_commit_reconciliation gate.
func TestGitAuthoritativeCommitReconciliation(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)

	t.Run("exact patch on exact base, CAS, trailer, no hooks", func(t *testing.T) {
		base := f.head()
		p := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(fixAuth))))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)))
		if c.State != "committed" {
			t.Fatal(c.State)
		}
		head := f.head()
		if head == base || sh(t, f.bare, "git", "rev-parse", head+"^") != base {
			t.Fatal("ref is not a child of the base")
		}
		msg := sh(t, f.bare, "git", "log", "-1", "--format=%B", head)
		if !strings.Contains(msg, "Autonomic-Effect: "+p.ID) {
			t.Fatalf("no trailer in %q", msg)
		}
		if got := sh(t, f.bare, "git", "show", head+":lib/auth.go"); !strings.Contains(got, "return true") {
			t.Fatal(got)
		}
		if _, err := os.Stat(f.marker); err == nil {
			b, _ := os.ReadFile(f.marker)
			t.Fatalf("repository hooks ran: %s", b)
		}
		// Reconciling a committed effect's request finds the trailer.
		eff, _ := e.store.Effect(ctxT(t), mustUUID(p.ID))
		ar, _ := e.broker.request(eff)
		if r := gc.Reconcile(ctxT(t), ar); r.Outcome != Committed {
			t.Fatalf("reconcile: %v", r)
		}
	})

	t.Run("paths outside the allowed set", func(t *testing.T) {
		base := f.head()
		for name, edit := range map[string]func(string){
			"forbidden dir": func(d string) {
				_ = os.WriteFile(filepath.Join(d, "test/auth_test.go"), []byte("package test // x\n"), 0o644)
			},
			"dotenv":         func(d string) { _ = os.WriteFile(filepath.Join(d, ".env"), []byte("SECRET=2\n"), 0o644) },
			"not allowed":    func(d string) { _ = os.WriteFile(filepath.Join(d, "Makefile"), []byte("all:\n"), 0o644) },
			"secret in lib":  func(d string) { _ = os.WriteFile(filepath.Join(d, "lib/my_secret.go"), []byte("package lib\n"), 0o644) },
			"rename out":     func(d string) { _ = os.Rename(filepath.Join(d, "lib/auth.go"), filepath.Join(d, "test/auth.go")) },
			"symlink":        func(d string) { _ = os.Symlink("/etc/passwd", filepath.Join(d, "lib/link")) },
			"mode change ok": nil,
		} {
			if edit == nil {
				continue
			}
			t.Run(name, func(t *testing.T) {
				r := e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(edit)))
				wantErr(t, r, protocol.CodeForbidden)
			})
		}
		wantErr(t, e.do(prepareReq(e, "git_commit", "repo", map[string]string{"base_oid": base, "ref": "refs/heads/release", "message": "m"}, f.patch(fixAuth))), protocol.CodeForbidden)
		wantErr(t, e.do(prepareReq(e, "git_commit", "repo", map[string]string{"base_oid": base, "ref": "refs/heads/main", "message": "m\n\nAutonomic-Effect: x"}, f.patch(fixAuth))), protocol.CodeInvalidField)
		if f.head() != base {
			t.Fatal("a refused patch moved the ref")
		}
	})

	t.Run("ref moved before the horizon", func(t *testing.T) {
		base := f.head()
		p := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(func(d string) {
			_ = os.WriteFile(filepath.Join(d, "lib/new.go"), []byte("package lib\n"), 0o644)
		}))))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		f.moveRef()
		wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeRefMoved)
		if s := mustOK(t, e.do(byEffectReq(e, protocol.WorkerStatus, p))); s.State != "ready" {
			t.Fatalf("refused commit left %s", s.State)
		}
	})

	t.Run("ref moved inside the commit window is not committed", func(t *testing.T) {
		base := f.head()
		p := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(func(d string) {
			_ = os.WriteFile(filepath.Join(d, "lib/other.go"), []byte("package lib\n"), 0o644)
		}))))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		var moved string
		gc.BeforeUpdateRef = func() { moved = f.moveRef() }
		defer func() { gc.BeforeUpdateRef = nil }()
		// The swap failed and the ref does not reach the kernel's own,
		// brand-new commit: provably not committed (issue 23 §6).
		wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeRefMoved)
		s := mustOK(t, e.do(byEffectReq(e, protocol.WorkerStatus, p)))
		var rc map[string]any
		_ = json.Unmarshal(s.Receipt, &rc)
		if s.State == "commit_unknown" || s.State == "committed" || rc["ambiguous"] == true {
			t.Fatalf("%s %s", s.State, s.Receipt)
		}
		if f.head() != moved {
			t.Fatal("the other writer's ref was overwritten")
		}
		// It is settled: reconciliation has nothing to decide.
		gc.BeforeUpdateRef = nil
		st, err := e.broker.Reconcile(ctxT(t), e.ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) != 0 {
			t.Fatalf("reconciled: %+v", st)
		}
	})
}
