package broker

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

const peerConnectEnv = "AUTONOMIC_PEER_CONNECT"

// peerConnectHelper (from TestMain, in the re-executed binary) connects to
// the socket and waits for stdin to close or for its death.
func peerConnectHelper(path string) {
	c, err := net.Dial("unix", path)
	if err != nil {
		os.Exit(3)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	c.Close()
	os.Exit(0)
}

// TestPeerPidfdFallback: the peer binding holds with and without
// SO_PEERPIDFD. Debian 12's 6.1 kernel answers ENOPROTOOPT for it; there
// the broker opens a pidfd on the SO_PEERCRED pid and checks the pid's start
// time. Both paths run here (6.18; the fallback forced by peerFallback):
// a live peer is identified with its own cgroup, and a peer that dies
// before its pidfd is opened, or between the cgroup read and the liveness
// check, is refused — its pid could name another process by then.
func TestPeerPidfdFallback(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := func() (*exec.Cmd, *net.UnixConn) {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), peerConnectEnv+"="+path)
		stdin, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
		c, err := ln.AcceptUnix()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return cmd, c
	}
	kill := func(cmd *exec.Cmd) { _ = cmd.Process.Kill(); _ = cmd.Wait() } // killed and reaped: its pid is free
	defer func() { peerFallback, peerHook = false, nil }()
	for _, fallback := range []bool{false, true} {
		name := map[bool]string{false: "SO_PEERPIDFD", true: "pidfd_open fallback"}[fallback]
		t.Run(name, func(t *testing.T) {
			peerFallback = fallback
			peerHook = nil
			t.Run("live peer", func(t *testing.T) {
				cmd, c := peer()
				want, err := cgroupOf(cmd.Process.Pid)
				if err != nil {
					t.Fatal(err)
				}
				pid, got, err := peerCgroup(c)
				if err != nil || pid != cmd.Process.Pid || got != want {
					t.Fatalf("pid %d cgroup %q err %v; want %d %q", pid, got, err, cmd.Process.Pid, want)
				}
			})
			for _, step := range []string{"credentials", "cgroup"} {
				t.Run("peer died after "+step, func(t *testing.T) {
					cmd, c := peer()
					peerHook = func(at string, pid int) {
						if at == step {
							kill(cmd)
						}
					}
					defer func() { peerHook = nil }()
					_, _, err := peerCgroup(c)
					if err == nil || protocol.AsWire(err).Code != protocol.CodePeerRefused {
						t.Fatalf("a dead peer: %v", err)
					}
				})
			}
		})
	}
	t.Run("a process younger than the connection is not the peer", func(t *testing.T) {
		// As if the connecting process had exited and its pid had been
		// given to a process started after the connection was accepted.
		peerFallback = true
		_, c := peer()
		peerClock = func() uint64 { return 1 }
		defer func() { peerClock = bootTicks }()
		if _, _, err := peerCgroup(c); err == nil || protocol.AsWire(err).Code != protocol.CodePeerRefused {
			t.Fatalf("a recycled pid: %v", err)
		}
	})
}
