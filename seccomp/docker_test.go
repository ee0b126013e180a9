package seccomp

import (
	"encoding/json"
	"sort"
	"testing"

	moby "github.com/moby/profiles/seccomp"
)

// dockerKernel pins minKernel evaluation so that Docker's program, and its
// golden digest, do not depend on the test host.
var dockerKernel = KernelVersion{Major: 6, Minor: 1}

// dockerDefault converts Docker's default profile (moby/profiles) to our
// format: marshal it as moby writes it, drop the syscall names this
// libseccomp does not know (they are newer than the library; the ENOSYS stub
// answers them, as runc would), and parse the result strictly. The dropped
// names are returned so tests can show them.
func dockerDefault(t testing.TB) (Profile, []string) {
	t.Helper()
	raw, err := json.Marshal(moby.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	dropped := map[string]bool{}
	var rules []any
	for _, r := range doc["syscalls"].([]any) {
		rule := r.(map[string]any)
		var keep []any
		for _, n := range rule["names"].([]any) {
			if knownSyscall(n.(string)) {
				keep = append(keep, n)
			} else {
				dropped[n.(string)] = true
			}
		}
		if len(keep) == 0 {
			continue
		}
		rule["names"] = keep
		rules = append(rules, rule)
	}
	doc["syscalls"] = rules
	if raw, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	p, err := Parse(raw)
	if err != nil {
		t.Fatalf("our parser refuses Docker's default profile: %v", err)
	}
	var names []string
	for n := range dropped {
		names = append(names, n)
	}
	sort.Strings(names)
	return p, names
}

func TestDockerDefaultProfileCompiles(t *testing.T) {
	p, dropped := dockerDefault(t)
	t.Logf("names unknown to libseccomp, left to the ENOSYS stub: %v", dropped)
	prog, err := Compile(p, Options{Kernel: dockerKernel})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("docker default: %d instructions, sha256 %s", prog.Count, prog.SHA256)
	for _, tc := range []struct {
		nr   int32
		args [6]uint64
		want string
	}{
		{39, [6]uint64{}, "SCMP_ACT_ALLOW"},                    // getpid
		{165, [6]uint64{}, "SCMP_ACT_ERRNO(1 EPERM)"},          // mount: CAP_SYS_ADMIN only
		{435, [6]uint64{}, "SCMP_ACT_ERRNO(38 ENOSYS)"},        // clone3
		{56, [6]uint64{0x10000000}, "SCMP_ACT_ERRNO(1 EPERM)"}, // clone(CLONE_NEWUSER)
		{56, [6]uint64{0x01200011}, "SCMP_ACT_ALLOW"},          // fork-style clone
		{101, [6]uint64{}, "SCMP_ACT_ALLOW"},                   // ptrace: minKernel 4.8
		{41, [6]uint64{2}, "SCMP_ACT_ALLOW"},                   // socket(AF_INET)
		{41, [6]uint64{40}, "SCMP_ACT_ERRNO(1 EPERM)"},         // socket(AF_VSOCK)
		{135, [6]uint64{0xffffffff}, "SCMP_ACT_ALLOW"},         // personality query
	} {
		got, err := Run(prog.Instructions, Data{Nr: tc.nr, Arch: 0xc000003e, Args: tc.args})
		if err != nil {
			t.Fatal(err)
		}
		if ActionString(got) != tc.want {
			t.Errorf("docker default: nr %d args %#x = %s, want %s", tc.nr, tc.args[:2], ActionString(got), tc.want)
		}
	}
}
