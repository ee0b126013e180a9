package seccomp

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCommand(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Command(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCommand(t *testing.T) {
	want := mustCompile(t, mustShipped(t, "worker"), Options{})

	code, out, errs := runCommand("compile", "profiles/worker.json")
	if code != 0 || out != string(want.Bytes()) || !strings.Contains(errs, "sha256 "+want.SHA256) || !strings.Contains(errs, "instructions 500") {
		t.Fatalf("compile: code %d, %d bytes, stderr %q", code, len(out), errs)
	}
	code, out, _ = runCommand("compile", "--base64", "builtin:worker")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if code != 0 || err != nil || string(raw) != string(want.Bytes()) {
		t.Fatalf("compile --base64: code %d, err %v", code, err)
	}
	file := filepath.Join(t.TempDir(), "worker.bpf")
	code, out, _ = runCommand("compile", "-o", file, "profiles/worker.json")
	got, err := os.ReadFile(file)
	if code != 0 || err != nil || string(got) != string(want.Bytes()) || !strings.Contains(out, want.SHA256) {
		t.Fatalf("compile -o: code %d, err %v, out %q", code, err, out)
	}

	code, out, _ = runCommand("explain", "profiles/worker.json", "ioctl", "0", "0x100005412")
	if code != 0 || !strings.Contains(out, "answer: SCMP_ACT_ERRNO(1 EPERM)") {
		t.Fatalf("explain: code %d out %q", code, out)
	}
	code, out, _ = runCommand("check", "profiles/worker.json", "profiles/worker-loopback.json", "profiles/floor.json")
	if code != 0 || strings.Count(out, "ok ") != 3 {
		t.Fatalf("check: code %d out %q", code, out)
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["nosuchcall"],"action":"SCMP_ACT_ERRNO"}]}`), 0o644)
	if code, _, errs = runCommand("check", bad); code != 1 || !strings.Contains(errs, `syscalls[0] (nosuchcall)`) {
		t.Fatalf("check bad: code %d stderr %q", code, errs)
	}
	for _, args := range [][]string{nil, {"frob"}, {"compile"}, {"explain", "x"}, {"compile", "-kernel", "six", "x"}, {"explain", "profiles/worker.json", "read", "-1"}} {
		if code, _, _ := runCommand(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
