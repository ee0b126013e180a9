package seccomp

import (
	"testing"

	"github.com/autonomic-kernel/autonomic/seccomp/seccomptest"
)

// dockerKernel pins minKernel evaluation so that Docker's program, and its
// golden digest, do not depend on the test host.
var dockerKernel = KernelVersion{Major: 6, Minor: 1}

// dockerDefault parses Docker's default profile, converted by seccomptest;
// the names dropped as unknown to this libseccomp are returned for logging.
func dockerDefault(t testing.TB) (Profile, []string) {
	t.Helper()
	raw, dropped, err := seccomptest.DockerDefaultJSON()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(raw)
	if err != nil {
		t.Fatalf("our parser refuses Docker's default profile: %v", err)
	}
	return p, dropped
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
