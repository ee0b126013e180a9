package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestReleaseBlockers: a dirty tree, a missing record of what ran and each
// limit the host does not enforce each block release_ready, by name.
func TestReleaseBlockers(t *testing.T) {
	clean := report{Commit: "abc", Host: hostFacts{Limits: []protocol.Limit{{Name: "pids", Enforced: true}}}}
	if b := blockers(clean); len(b) != 0 {
		t.Fatalf("a clean, enforced run is blocked: %v", b)
	}
	dirty := clean
	dirty.SourceDirty = true
	missing := clean
	missing.Host = host(filepath.Join(t.TempDir(), "built.json"))
	for _, c := range []struct {
		name string
		r    report
		want string
	}{
		{"dirty", dirty, "source_dirty"},
		{"no commit", report{}, "no git commit"},
		{"no record", missing, "no record of what the gates built"},
		{"not enforced", report{Commit: "abc", Host: hostFacts{NotEnforced: []string{"memory_bytes: no controller"}}}, "memory_bytes"},
	} {
		b := blockers(c.r)
		if !slices.ContainsFunc(b, func(s string) bool { return strings.Contains(s, c.want) }) {
			t.Errorf("%s: blockers %v, want one naming %q", c.name, b, c.want)
		}
	}
}

// TestReleaseReadyFollowsTheTree: release_ready, decided as qc decides it
// (newReport on a real work tree, then decide), is false whenever the tree
// is not exactly its commit — an edit, an untracked file, a tree git cannot
// read — even with every gate and guest passed; a clean tree is released.
func TestReleaseReadyFollowsTheTree(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	os.WriteFile(filepath.Join(dir, "f"), []byte("v1\n"), 0o644)
	git("add", "f")
	git("commit", "-qm", "f")
	enforced := hostFacts{Limits: []protocol.Limit{{Name: "pids", Enforced: true}}}
	ready := func(dir string) (bool, report) {
		r := newReport(dir, "strict")
		r.Host = enforced
		decide(&r, true, true, true)
		return r.ReleaseReady, r
	}
	if ok, r := ready(dir); !ok {
		t.Fatalf("a clean tree with everything passed is not release-ready: %+v", r)
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("v2\n"), 0o644)
	if ok, r := ready(dir); ok || !r.SourceDirty {
		t.Fatalf("an edited tree is release-ready: %+v", r)
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("v1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "untracked"), nil, 0o644)
	if ok, _ := ready(dir); ok {
		t.Fatal("a tree with an untracked file is release-ready")
	}
	if ok, r := ready(t.TempDir()); ok || !r.SourceDirty {
		t.Fatalf("a tree git cannot read is release-ready: %+v", r)
	}
	// Nothing else may stand in for the tree: a failing gate or guest.
	os.Remove(filepath.Join(dir, "untracked"))
	r := newReport(dir, "strict")
	r.Host = enforced
	for _, c := range []struct{ strict, gates, guests bool }{{false, true, true}, {true, false, true}, {true, true, false}} {
		decide(&r, c.strict, c.gates, c.guests)
		if r.ReleaseReady {
			t.Errorf("release-ready with strict=%v gates=%v guests=%v", c.strict, c.gates, c.guests)
		}
	}
}

func TestFailureExcerpt(t *testing.T) {
	log := "=== RUN   Test_x\n    gate.go:10: running ./kernel\n    takeover_test.go:88: resumed on generation 1, want 2\nsome noise\n--- FAIL: Test_x (3.00s)\n"
	got := failureExcerpt([]byte(log), 60)
	want := []string{"    gate.go:10: running ./kernel", "    takeover_test.go:88: resumed on generation 1, want 2", "--- FAIL: Test_x (3.00s)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("excerpt %q, want %q", got, want)
	}
	if got := failureExcerpt([]byte(log), 1); len(got) != 1 || got[0] != want[2] {
		t.Fatalf("capped excerpt %q, want the last line", got)
	}
}
