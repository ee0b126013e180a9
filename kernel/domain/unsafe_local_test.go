package domain_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
)

// TestUnsafeLocalSaysItIsolatesNothing: the development backend runs the
// worker as a plain child and labels everything it reports as unisolated.
func TestUnsafeLocalSaysItIsolatesNothing(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := &domain.UnsafeLocal{WorkspacesRoot: root}
	rep, _ := u.Preflight(context.Background())
	if rep.Verdict != "refused" || !strings.Contains(strings.Join(rep.Problems, " "), "no isolation") {
		t.Fatalf("preflight: %+v", rep)
	}
	r, err := u.Create(context.Background(), domain.Spec{ID: "local", Generation: 1, WorkspaceID: "ws", Argv: []string{"/bin/sh", "-c", "pwd; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	var last domain.Event
	for ev := range r.Events() {
		last = ev
	}
	if last.Exited == nil || *last.Exited.ExitCode != 3 || last.Isolation != "none" {
		t.Fatalf("last event %+v", last)
	}
	if got := strings.TrimSpace(string(r.Output())); got != filepath.Join(root, "ws") {
		t.Errorf("worker ran in %q", got)
	}
	if r.Started.Seccomp != "unfiltered" {
		t.Errorf("started says %q", r.Started.Seccomp)
	}
}
