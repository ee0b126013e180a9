package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/server"
	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
)

// listenNotify is systemd's side of NOTIFY_SOCKET.
func listenNotify(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readNotify returns the next message, or "" when none came within a
// minute.
func readNotify(c *net.UnixConn) string {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// The unit is Type=notify: READY=1 must come from serve's production
// hooks, only once the operator API answers, and NOTIFY_SOCKET must not
// reach the kernel's children (a worker-controlled verification runner or
// git could otherwise speak for the kernel).
func TestServeNotifiesReadinessWhenTheAPIAnswers(t *testing.T) {
	k := servertest.New(t, "notify", nil)
	sock := filepath.Join(t.TempDir(), "notify")
	ln := listenNotify(t, sock)
	t.Setenv("NOTIFY_SOCKET", sock)
	n := takeNotifier()
	if v, ok := os.LookupEnv("NOTIFY_SOCKET"); ok {
		t.Fatalf("NOTIFY_SOCKET=%q is still in the environment the kernel's children inherit", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := make(chan string, 1)
	go func() { got <- readNotify(ln) }()
	stop, err := server.Start(ctx, k.Config, hclog.NewNullLogger(), serveHooks(n))
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	defer stop()
	if s := <-got; s != "READY=1" {
		t.Fatalf("notification %q, want READY=1", s)
	}
	if _, err := api.NewClient(k.Config.APISocket()).Episodes(ctx, 1); err != nil {
		t.Fatalf("READY=1 sent but the API does not answer: %v", err)
	}
}

func TestNotifierAddresses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "n")
	ln := listenNotify(t, path)
	abstract := "@autonomic-notify-test-" + filepath.Base(dir)
	aln := listenNotify(t, "\x00"+abstract[1:])
	for _, c := range []struct {
		env  string
		ln   *net.UnixConn
		sent bool
	}{
		{path, ln, true},
		{abstract, aln, true},
		{"", nil, false},
		{"relative/name", nil, false},
		{filepath.Join(dir, "absent"), nil, false},
	} {
		t.Setenv("NOTIFY_SOCKET", c.env)
		n := takeNotifier()
		if sent := n.send("STOPPING=1"); sent != c.sent {
			t.Fatalf("NOTIFY_SOCKET=%q: sent %v, want %v", c.env, sent, c.sent)
		}
		if c.ln != nil {
			if s := readNotify(c.ln); s != "STOPPING=1" {
				t.Fatalf("NOTIFY_SOCKET=%q: got %q", c.env, s)
			}
		}
	}
}

// The shipped unit passes systemd's own checker against the installed
// binary (make test installs it first).
func TestSystemdUnitVerifies(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		privileged.Skip(t, "systemd-analyze is not installed (Debian package systemd)")
	}
	if _, err := os.Stat("/usr/local/bin/autonomic"); err != nil {
		privileged.Skip(t, "autonomic is not installed (make install)")
	}
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(root, "config", "systemd", "autonomic.service")
	// --man=no: a stock server (the matrix's guest) has no man pages, and
	// the unit must verify there too; so the unit names none.
	out, err := exec.Command(bin, "verify", "--man=no", unit).CombinedOutput()
	// verify warns about units it cannot load on a host without systemd
	// as PID 1; only lines naming our unit count.
	var ours []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "autonomic.service") {
			ours = append(ours, l)
		}
	}
	if err != nil || len(ours) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "Documentation=man:") {
		t.Fatal("the unit names a man page: systemd-analyze verify fails on a host without man (the Debian guest)")
	}
	// The sudo hop needs a setuid exec: no directive that sets or implies
	// no_new_privs may creep in.
	for _, d := range []string{"NoNewPrivileges", "SystemCallFilter", "SystemCallArchitectures", "RestrictAddressFamilies",
		"RestrictNamespaces", "RestrictSUIDSGID", "RestrictRealtime", "MemoryDenyWriteExecute", "LockPersonality",
		"PrivateDevices", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectClock", "DynamicUser",
		"ProtectSystem", "ProtectHome", "PrivateTmp", "ProtectControlGroups", "CapabilityBoundingSet"} {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), d+"=") {
				t.Fatalf("the unit sets %s, which breaks the sudo hop to the launcher or confines the launcher: %q", d, l)
			}
		}
	}
}
