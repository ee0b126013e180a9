package domain_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
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

// TestSudoersRuleExecsTheLauncherInPlace proves the repository's rule (not
// the installed one) as the service account, with the launcher from this
// checkout: sudo accepts it with no arguments and refuses any argument, and
// with the rule's Defaults (no pty, no PAM session or credentials) it execs
// the launcher in its own place, so no sudo stays beside a live domain. The
// rule goes in a temporary drop-in naming a copy under /run, where only
// root creates entries, so a drop-in left behind names no path another
// user could fill.
func TestSudoersRuleExecsTheLauncherInPlace(t *testing.T) {
	privileged.Require(t)
	if _, err := user.Lookup("autonomic"); err != nil {
		privileged.Skip(t, "no autonomic account: run make install")
	}
	bed, err := testbed.New(t.Context(), testbed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Close() })
	dir := fmt.Sprintf("/run/autonomic-sudoers-test-%d", os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	launcher := filepath.Join(dir, "autonomic-launcher")
	bin, err := os.ReadFile(bed.Launcher)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(launcher, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	rule, _ := os.ReadFile(repoSudoers(t))
	dropin := strings.ReplaceAll(string(rule), domain.DefaultLauncherPath, launcher)
	if dropin == string(rule) {
		t.Fatalf("the repository's rule does not name %s", domain.DefaultLauncherPath)
	}
	tmp := filepath.Join(dir, "sudoers")
	if err := os.WriteFile(tmp, []byte(dropin), 0o440); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("visudo", "-cqf", tmp).CombinedOutput(); err != nil {
		t.Fatalf("visudo: %v: %s", err, out)
	}
	name := fmt.Sprintf("/etc/sudoers.d/autonomic-test-%d", os.Getpid())
	if err := os.WriteFile(name, []byte(dropin), 0o440); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(name) })

	if _, err := asKernel(t, nil, "sudo", "-n", "-l", launcher); err != nil {
		t.Fatalf("sudo -l refuses the launcher without arguments: %v", err)
	}
	if _, err := asKernel(t, nil, "sudo", "-n", launcher, "x"); err == nil {
		t.Fatal("sudo runs the launcher with an argument")
	}

	// The launcher waits for its request: see what runs meanwhile.
	u, _ := user.Lookup("autonomic")
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd := exec.Command("sudo", "-n", launcher)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	cmd.Env, cmd.Dir = []string{"PATH=/usr/bin:/bin"}, "/"
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exe := ""
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		// sudo's own image until it execs; the launcher's after.
		if exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); exe == launcher {
			break
		}
		if children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)); len(bytes.TrimSpace(children)) > 0 {
			break // sudo forked the launcher and stays beside it
		}
	}
	stdin.Close()
	_ = cmd.Wait()
	if exe != launcher {
		t.Fatalf("sudo did not exec the launcher in place (the process runs %q): the rule's Defaults keep sudo resident beside every domain", exe)
	}
	// It ran as root: an empty request is refused for what it is, not for
	// want of privilege.
	b, err := protocol.ReadFrame(bytes.NewReader(out.Bytes()), protocol.LauncherResponseMax, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := protocol.DecodeLauncherResponse(b)
	if err != nil || r.Type != protocol.TypeError || r.Error == nil || r.Error.Code == protocol.CodeNotPrivileged {
		t.Fatalf("launcher through the rule: %+v %v", r, err)
	}
}
