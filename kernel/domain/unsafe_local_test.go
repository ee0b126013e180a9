package domain_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestUnsafeLocalLifecycleCalls: UnsafeLocal promises neither isolation nor
// checkpoints, refuses to pretend to restore one, tells the worker where
// its workspace and broker socket are, names the cgroup the worker shares
// with the kernel, and destroy returns only once the worker is reaped.
func TestUnsafeLocalLifecycleCalls(t *testing.T) {
	ctx := context.Background()
	root, sockets := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := &domain.UnsafeLocal{WorkspacesRoot: root, SocketsRoot: sockets}
	if f := u.Features(); f.Checkpoints || f.Isolated || f.Backend != "unsafe_local" {
		t.Fatalf("features %+v", f)
	}
	if f := (&domain.Linux{}).Features(); !f.Checkpoints || !f.Isolated || f.Backend != "linux" {
		t.Fatalf("linux features %+v", f)
	}
	if _, err := u.Create(ctx, domain.Spec{ID: "restore", WorkspaceID: "ws", Checkpoint: strings.Repeat("a", 64),
		Argv: []string{"/bin/true"}}); err == nil {
		t.Fatal("UnsafeLocal started a worker where a restored one was asked for")
	}
	if _, err := (&domain.UnsafeLocal{WorkspacesRoot: root}).Create(ctx, domain.Spec{ID: "nosock", WorkspaceID: "ws",
		BrokerSocket: "ep", Argv: []string{"/bin/true"}}); err == nil {
		t.Fatal("a broker socket without SocketsRoot was accepted")
	}
	r, err := u.Create(ctx, domain.Spec{ID: "local", Generation: 1, WorkspaceID: "ws", BrokerSocket: "ep",
		Env:  map[string]string{domain.EnvWorkspace: "/elsewhere"},
		Argv: []string{"/bin/sh", "-c", `echo "$` + domain.EnvWorkspace + ` $` + domain.EnvBrokerSocket + `"; exec sleep 60`}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(r.Output()) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if r.Cgroup() == "" || !strings.Contains(string(self), "0::"+r.Cgroup()+"\n") {
		t.Errorf("worker cgroup %q, kernel's %q", r.Cgroup(), self)
	}
	if _, err := u.Checkpoint(ctx, "local"); err == nil {
		t.Error("UnsafeLocal checkpointed")
	}
	if st, err := u.Destroy(ctx, "local"); err != nil || !st.Destroyed {
		t.Fatalf("destroy: %+v, %v", st, err)
	}
	if st, _ := u.Inspect(ctx, "local"); st.Exists {
		t.Fatal("the worker exists after destroy returned")
	}
	r.Close()
	want := filepath.Join(root, "ws") + " " + filepath.Join(sockets, "ep.sock")
	if got := strings.TrimSpace(string(r.Output())); got != want {
		t.Errorf("worker environment %q, want %q", got, want)
	}
}
