package domain_test

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
)

func repoSudoers(t *testing.T) string {
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(mod, "sudoers.d", "autonomic")
}

func TestSudoersRuleParses(t *testing.T) {
	privileged.Require(t)
	if out, err := exec.Command("visudo", "-cf", repoSudoers(t)).CombinedOutput(); err != nil {
		t.Fatalf("visudo -cf: %v\n%s", err, out)
	}
}

// asKernel runs a command as the autonomic service account.
func asKernel(t *testing.T, stdin []byte, name string, args ...string) ([]byte, error) {
	t.Helper()
	u, err := user.Lookup("autonomic")
	if err != nil {
		privileged.Skip(t, "no autonomic account: run make install")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	err = cmd.Run()
	return out.Bytes(), err
}

// TestSudoersRuleAllowsOnlyTheLauncherWithoutArguments proves the installed
// rule, exercised as the service account: the launcher with no arguments
// runs as root; any argument, or any other command, is refused by sudo.
func TestSudoersRuleAllowsOnlyTheLauncherWithoutArguments(t *testing.T) {
	privileged.Require(t)
	installed, err := os.ReadFile("/etc/sudoers.d/autonomic")
	if err != nil {
		privileged.Skip(t, "sudoers rule not installed: run make install")
	}
	want, _ := os.ReadFile(repoSudoers(t))
	if !bytes.Equal(installed, want) {
		t.Fatalf("/etc/sudoers.d/autonomic differs from the repository's rule: run make install")
	}
	if _, err := os.Stat(domain.DefaultLauncherPath); err != nil {
		privileged.Skip(t, "launcher not installed: run make install")
	}
	if _, err := asKernel(t, nil, "sudo", "-n", "-l", domain.DefaultLauncherPath); err != nil {
		t.Fatalf("sudo -l refuses the launcher without arguments: %v", err)
	}
	for _, argv := range [][]string{
		{domain.DefaultLauncherPath, "--config", "/tmp/x"},
		{domain.DefaultLauncherPath, ""},
		{"/bin/true"},
		{"/bin/sh", "-c", "id"},
	} {
		if _, err := asKernel(t, nil, "sudo", append([]string{"-n", "-l"}, argv...)...); err == nil {
			t.Errorf("sudo -l allows %q", argv)
		}
		if _, err := asKernel(t, nil, "sudo", append([]string{"-n"}, argv...)...); err == nil {
			t.Errorf("sudo runs %q", argv)
		}
	}
	// And the real hop: a preflight through sudo, as the kernel does it.
	req, _ := protocol.Encode(&protocol.LauncherRequest{Protocol: 1, Action: protocol.ActionPreflight, RequestID: "sudo-test"})
	var in bytes.Buffer
	_ = protocol.WriteFrame(&in, req, protocol.LauncherRequestMax)
	out, err := asKernel(t, in.Bytes(), "sudo", "-n", domain.DefaultLauncherPath)
	if err != nil {
		t.Fatalf("launcher through sudo: %v (%q)", err, out)
	}
	b, err := protocol.ReadFrame(bytes.NewReader(out), protocol.LauncherResponseMax, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := protocol.DecodeLauncherResponse(b)
	if err != nil || r.Type != protocol.TypePreflight || r.RequestID != "sudo-test" {
		t.Fatalf("preflight through sudo: %+v %v", r, err)
	}
}
