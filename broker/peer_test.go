package broker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
)

// TestPeerAliveAcrossUIDs: the kernel runs as its service account and the
// worker under another uid, so signal 0 through the worker's pidfd answers
// EPERM. That is a live peer, not an exited one (a kernel running as a
// service refused every worker until this test existed). The check runs in
// a helper process under uid 65534, without CAP_KILL, against a process of
// uid 65533; after that process is killed the same check says exited.
func TestPeerAliveAcrossUIDs(t *testing.T) {
	privileged.Require(t)
	peer := exec.Command("sleep", "60")
	peer.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65533}}
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = peer.Process.Kill(); _ = peer.Wait() }()
	// The helper must be executable by uid 65534: a copy of this binary
	// in a world-readable directory.
	dir, err := os.MkdirTemp("", "autonomic-peer-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(dir, "broker.test")
	if err := os.Chmod(dir, 0o755); err != nil || os.WriteFile(helper, self, 0o755) != nil {
		t.Fatalf("helper copy: %v", err)
	}
	check := func() string {
		cmd := exec.Command(helper)
		cmd.Env = append(os.Environ(), peerAliveEnv+"="+strconv.Itoa(peer.Process.Pid))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	if out := check(); !strings.Contains(out, "PEER alive") {
		t.Fatalf("a live peer of another uid: %s", out)
	}
	// A pidfd whose process has exited and been reaped: gone.
	fd, err := unix.PidfdOpen(peer.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	_ = peer.Process.Kill()
	_ = peer.Wait()
	if err := peerAlive(fd); err == nil {
		t.Fatal("an exited peer reads as alive")
	}
}

const peerAliveEnv = "AUTONOMIC_PEER_ALIVE_PID"

// peerAliveHelper (from TestMain, in the re-executed binary) opens a pidfd for pid and prints what peerAlive says.
func peerAliveHelper(pid string) {
	n, _ := strconv.Atoi(pid)
	fd, err := unix.PidfdOpen(n, 0)
	switch {
	case err != nil:
		os.Stdout.WriteString("PEER gone (no pidfd: " + err.Error() + ")\n")
	case peerAlive(fd) != nil:
		os.Stdout.WriteString("PEER gone\n")
	default:
		os.Stdout.WriteString("PEER alive\n")
	}
	os.Exit(0)
}
