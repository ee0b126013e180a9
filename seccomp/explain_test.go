package seccomp

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestExplain(t *testing.T) {
	worker, floor := mustShipped(t, "worker"), mustShipped(t, "floor")
	tests := []struct {
		name    string
		p       Profile
		syscall string
		args    []uint64
		action  string
		rule    int // -1: not a rule
		reason  string
	}{
		{"allowlisted", worker, "getpid", nil, allow, 0, "syscalls[0] matches (unconditional)"},
		{"default", worker, "mount", nil, eperm, -1, "default action"},
		{"notify", worker, "socket", []uint64{unix.AF_INET, unix.SOCK_STREAM}, notify, 45, "arg0 == 0x2"},
		{"unix socket", worker, "socket", []uint64{unix.AF_UNIX}, allow, 43, "arg0 == 0x1"},
		{"clone3", worker, "clone3", nil, enosys, 37, "syscalls[37] matches"},
		{"clone newuser", worker, "clone", []uint64{unix.CLONE_NEWUSER}, eperm, -1, "default action"},
		{"tiocsti high bits", worker, "ioctl", []uint64{0, unix.TIOCSTI | high}, eperm, -1, "default action"},
		{"tcgets", worker, "ioctl", []uint64{0, unix.TCGETS}, allow, -2, "matches (arg1 &"},
		{"newer than profile", worker, "470", nil, enosys, -1, "newer than every syscall"},
		{"floor tiocsti", floor, "ioctl", []uint64{0, unix.TIOCSTI | high}, eperm, 9, "TIOCSTI"},
		{"floor clone newns", floor, "clone", []uint64{unix.CLONE_NEWNS | unix.CLONE_NEWUSER}, eperm, -2, "CLONE_NEW"},
		{"floor allows", floor, "getpid", nil, allow, -1, "default action"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := Explain(tc.p, tc.syscall, tc.args, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if x.Action != tc.action || (tc.rule != -2 && x.Rule != tc.rule) || !strings.Contains(x.Reason, tc.reason) {
				t.Fatalf("got action %s rule %d reason %q; want %s rule %d reason containing %q\n%s", x.Action, x.Rule, x.Reason, tc.action, tc.rule, tc.reason, x)
			}
			if tc.rule == -2 && x.Rule < 0 {
				t.Fatalf("no deciding rule:\n%s", x)
			}
		})
	}
	if _, err := Explain(worker, "frobnicate", nil, Options{}); err == nil {
		t.Error("Explain accepted an unknown syscall")
	}
	if _, err := Explain(worker, "read", make([]uint64, 7), Options{}); err == nil {
		t.Error("Explain accepted seven arguments")
	}
}
