package source

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func TestTreeOf(t *testing.T) {
	dir := t.TempDir()
	gitIn(t, dir, "init", "-q")
	os.WriteFile(filepath.Join(dir, "a"), []byte("a\n"), 0o644)
	gitIn(t, dir, "add", "a")
	gitIn(t, dir, "commit", "-qm", "a")
	clean := Of(dir)
	if clean.Dirty || clean.Commit == "" || clean.SHA256 == "" || !Same(clean, clean) {
		t.Fatalf("a clean tree: %+v", clean)
	}
	os.WriteFile(filepath.Join(dir, "a"), []byte("b\n"), 0o644)
	edited := Of(dir)
	if !edited.Dirty || edited.SHA256 == clean.SHA256 || Same(clean, edited) {
		t.Fatalf("an edited tracked file: %+v", edited)
	}
	os.WriteFile(filepath.Join(dir, "a"), []byte("a\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "new"), []byte("x\n"), 0o644)
	if u := Of(dir); !u.Dirty || u.SHA256 != clean.SHA256 {
		t.Fatalf("an untracked file: %+v", u)
	}
	os.Remove(filepath.Join(dir, "new"))
	// git cannot answer: not a repository, or no git at all.
	if n := Of(t.TempDir()); !n.Dirty || n.Why == "" || Same(n, n) {
		t.Fatalf("not a repository: %+v", n)
	}
	// Only `git status` fails: what it would have said is unknown, so the
	// tree is not clean.
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	script := "#!/bin/sh\nfor a; do [ \"$a\" = status ] && { echo 'fatal: index corrupt' >&2; exit 128; }; done\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "git"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	if n := Of(dir); !n.Dirty || n.Commit != clean.Commit || n.SHA256 != clean.SHA256 {
		t.Fatalf("a failing git status read as a clean tree: %+v", n)
	}
	t.Setenv("PATH", t.TempDir())
	if n := Of(dir); !n.Dirty {
		t.Fatalf("without git, the tree read as clean: %+v", n)
	}
}
