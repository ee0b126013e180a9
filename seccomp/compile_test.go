package seccomp

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.json")

const goldenPath = "testdata/golden.json"

type golden struct {
	Libseccomp string                 `json:"libseccomp"`
	Programs   map[string]goldenEntry `json:"programs"`
}

type goldenEntry struct {
	SHA256       string `json:"sha256"`
	Instructions int    `json:"instructions"`
}

func mustShipped(t testing.TB, name string) Profile {
	t.Helper()
	p, err := Shipped(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

func mustCompile(t testing.TB, p Profile, opts Options) Program {
	t.Helper()
	prog, err := Compile(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// goldenPrograms are the programs whose compiled bytes are pinned.
func goldenPrograms(t *testing.T) map[string]Program {
	out := map[string]Program{}
	for _, n := range ShippedNames() {
		out[n] = mustCompile(t, mustShipped(t, n), Options{})
	}
	out["worker+no-notify"] = mustCompile(t, mustShipped(t, "worker"), Options{NotifyUnsupported: true})
	docker, _ := dockerDefault(t)
	out["docker-default"] = mustCompile(t, docker, Options{Kernel: dockerKernel})
	return out
}

// TestGolden pins the compiled output of the shipped profiles: a change to a
// profile, to the compiler or to libseccomp shows up here as a digest change
// to be reviewed (go test ./seccomp -run TestGolden -update).
func TestGolden(t *testing.T) {
	progs := goldenPrograms(t)
	maj, min, mic := libseccomp.GetLibraryVersion()
	lib := fmt.Sprintf("%d.%d.%d", maj, min, mic)
	if *update {
		g := golden{Libseccomp: lib, Programs: map[string]goldenEntry{}}
		for n, p := range progs {
			g.Programs[n] = goldenEntry{SHA256: p.SHA256, Instructions: p.Count}
		}
		b, _ := json.MarshalIndent(g, "", "  ")
		if err := os.WriteFile(goldenPath, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if g.Libseccomp != lib {
		privileged.Skip(t, fmt.Sprintf("golden programs were compiled by libseccomp %s, this host has %s", g.Libseccomp, lib))
	}
	for n, p := range progs {
		want, ok := g.Programs[n]
		if !ok {
			t.Errorf("%s: no golden entry", n)
			continue
		}
		if p.SHA256 != want.SHA256 || p.Count != want.Instructions {
			t.Errorf("%s: compiled to %d instructions sha256 %s, golden is %d sha256 %s", n, p.Count, p.SHA256, want.Instructions, want.SHA256)
		}
	}
	if len(g.Programs) != len(progs) {
		t.Errorf("golden has %d programs, compiled %d", len(g.Programs), len(progs))
	}
}

func TestCompileDeterministic(t *testing.T) {
	for _, n := range ShippedNames() {
		p := mustShipped(t, n)
		a, b := mustCompile(t, p, Options{}), mustCompile(t, p, Options{})
		if a.SHA256 != b.SHA256 || string(a.Bytes()) != string(b.Bytes()) {
			t.Fatalf("%s: two compilations differ", n)
		}
		if !a.BinaryTree {
			t.Errorf("%s: libseccomp did not use the binary tree", n)
		}
		ins, err := DecodeInstructions(a.Bytes())
		if err != nil || len(ins) != a.Count {
			t.Fatalf("%s: round trip: %v", n, err)
		}
	}
}

const x86_64 = unix.AUDIT_ARCH_X86_64

const sigchld = uint64(unix.SIGCHLD)

type probe struct {
	what string
	nr   int32
	arch uint32
	args [6]uint64
	want string
}

func call(what string, nr int32, want string, args ...uint64) probe {
	p := probe{what: what, nr: nr, arch: x86_64, want: want}
	copy(p.args[:], args)
	return p
}

func runProbes(t *testing.T, prog Program, probes []probe) {
	t.Helper()
	for _, p := range probes {
		got, err := Run(prog.Instructions, Data{Nr: p.nr, Arch: p.arch, Args: p.args})
		if err != nil {
			t.Fatalf("%s: %v", p.what, err)
		}
		if ActionString(got) != p.want {
			t.Errorf("%s: got %s, want %s", p.what, ActionString(got), p.want)
		}
	}
}

const (
	allow  = "SCMP_ACT_ALLOW"
	eperm  = "SCMP_ACT_ERRNO(1 EPERM)"
	enosys = "SCMP_ACT_ERRNO(38 ENOSYS)"
	kill   = "SCMP_ACT_KILL_PROCESS"
	notify = "SCMP_ACT_NOTIFY"
)

// The kernel ignores the upper half of an ioctl request (CVE-2019-10063).
const high = 1 << 32

// floorProbes are the refusals the floor must make, whatever runs above it.
func floorProbes() []probe {
	var ps []probe
	for _, n := range []string{"mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "open_tree",
		"move_mount", "mount_setattr", "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
		"perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter",
		"io_uring_register", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		"open_by_handle_at", "iopl", "ioperm", "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "quotactl_fd"} {
		nr, err := libseccomp.GetSyscallFromNameByArch(n, libseccomp.ArchAMD64)
		if err != nil {
			panic(n)
		}
		ps = append(ps, call(n, int32(nr), eperm))
	}
	for _, bit := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET} {
		ps = append(ps, call(fmt.Sprintf("clone(%#x)", bit), unix.SYS_CLONE, eperm, bit|sigchld))
	}
	return append(ps,
		call("clone3", unix.SYS_CLONE3, enosys),
		call("ioctl TIOCSTI", unix.SYS_IOCTL, eperm, 0, unix.TIOCSTI),
		call("ioctl TIOCSTI|1<<32", unix.SYS_IOCTL, eperm, 0, unix.TIOCSTI|high),
		call("ioctl TIOCLINUX|0xffffffff<<32", unix.SYS_IOCTL, eperm, 0, unix.TIOCLINUX|0xffffffff00000000),
		probe{what: "x32 getpid", nr: 0x40000000 | unix.SYS_GETPID, arch: x86_64, want: kill},
		probe{what: "i386 getpid", nr: 20, arch: unix.AUDIT_ARCH_I386, want: kill},
		probe{what: "aarch64 getpid", nr: 172, arch: unix.AUDIT_ARCH_AARCH64, want: kill},
	)
}

func TestFloorSemantics(t *testing.T) {
	prog := mustCompile(t, mustShipped(t, "floor"), Options{})
	runProbes(t, prog, append(floorProbes(),
		call("getpid", unix.SYS_GETPID, allow),
		call("fork-style clone", unix.SYS_CLONE, allow, unix.CLONE_CHILD_SETTID|unix.CLONE_CHILD_CLEARTID|sigchld),
		call("thread clone", unix.SYS_CLONE, allow, 0x3d0f00),
		call("ioctl TCGETS", unix.SYS_IOCTL, allow, 0, unix.TCGETS),
		call("socket AF_INET", unix.SYS_SOCKET, allow, unix.AF_INET),
		call("syscall 600", 600, allow),
	))
}

func TestWorkerSemantics(t *testing.T) {
	common := []probe{
		call("getpid", unix.SYS_GETPID, allow),
		call("read", unix.SYS_READ, allow),
		call("openat", unix.SYS_OPENAT, allow),
		call("execve", unix.SYS_EXECVE, allow),
		call("fork-style clone", unix.SYS_CLONE, allow, unix.CLONE_CHILD_SETTID|unix.CLONE_CHILD_CLEARTID|sigchld),
		call("vfork-style clone", unix.SYS_CLONE, allow, unix.CLONE_VM|unix.CLONE_VFORK|sigchld),
		call("clone(CLONE_NEWUSER)", unix.SYS_CLONE, eperm, unix.CLONE_NEWUSER|sigchld),
		call("clone(CLONE_NEWNET)", unix.SYS_CLONE, eperm, unix.CLONE_NEWNET),
		call("clone3", unix.SYS_CLONE3, enosys),
		call("unshare", unix.SYS_UNSHARE, eperm),
		call("mount", unix.SYS_MOUNT, eperm),
		call("ptrace", unix.SYS_PTRACE, eperm),
		call("bpf", unix.SYS_BPF, eperm),
		call("perf_event_open", unix.SYS_PERF_EVENT_OPEN, eperm),
		call("keyctl", unix.SYS_KEYCTL, eperm),
		call("io_uring_setup", unix.SYS_IO_URING_SETUP, eperm),
		call("userfaultfd", unix.SYS_USERFAULTFD, eperm),
		call("kexec_load", unix.SYS_KEXEC_LOAD, eperm),
		call("init_module", unix.SYS_INIT_MODULE, eperm),
		call("ioctl TCGETS", unix.SYS_IOCTL, allow, 0, unix.TCGETS),
		call("ioctl TIOCGWINSZ", unix.SYS_IOCTL, allow, 1, unix.TIOCGWINSZ),
		call("ioctl sign-extended request", unix.SYS_IOCTL, allow, 3, 0xffffffff80086601),
		call("ioctl TIOCSTI", unix.SYS_IOCTL, eperm, 0, unix.TIOCSTI),
		call("ioctl TIOCSTI|1<<32", unix.SYS_IOCTL, eperm, 0, unix.TIOCSTI|high),
		call("ioctl TIOCLINUX", unix.SYS_IOCTL, eperm, 0, unix.TIOCLINUX),
		call("ioctl TIOCLINUX|1<<40", unix.SYS_IOCTL, eperm, 0, unix.TIOCLINUX|1<<40),
		call("socket AF_UNIX", unix.SYS_SOCKET, allow, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC),
		call("socket AF_PACKET", unix.SYS_SOCKET, eperm, unix.AF_PACKET, unix.SOCK_RAW),
		call("socketpair AF_UNIX", unix.SYS_SOCKETPAIR, allow, unix.AF_UNIX),
		call("personality query", unix.SYS_PERSONALITY, allow, 0xffffffff),
		call("personality READ_IMPLIES_EXEC", unix.SYS_PERSONALITY, eperm, 0x0400000),
		call("syscall newer than the profile", 470, enosys),
		call("unassigned gap", 400, eperm),
		probe{what: "x32 getpid", nr: 0x40000000 | unix.SYS_GETPID, arch: x86_64, want: kill},
		probe{what: "i386 getpid", nr: 20, arch: unix.AUDIT_ARCH_I386, want: kill},
	}
	t.Run("worker", func(t *testing.T) {
		prog := mustCompile(t, mustShipped(t, "worker"), Options{})
		if prog.ENOSYSAbove != 456 {
			t.Errorf("ENOSYSAbove = %d", prog.ENOSYSAbove)
		}
		runProbes(t, prog, append(common,
			call("socket AF_INET", unix.SYS_SOCKET, notify, unix.AF_INET, unix.SOCK_STREAM),
			call("socket AF_INET6", unix.SYS_SOCKET, notify, unix.AF_INET6, unix.SOCK_DGRAM),
			call("socket AF_INET raw", unix.SYS_SOCKET, notify, unix.AF_INET, unix.SOCK_RAW),
			call("socket AF_NETLINK", unix.SYS_SOCKET, eperm, unix.AF_NETLINK, unix.SOCK_RAW),
		))
	})
	t.Run("worker without user notification", func(t *testing.T) {
		prog := mustCompile(t, mustShipped(t, "worker"), Options{NotifyUnsupported: true})
		runProbes(t, prog, append(common,
			call("socket AF_INET", unix.SYS_SOCKET, kill, unix.AF_INET, unix.SOCK_STREAM),
			call("socket AF_INET6", unix.SYS_SOCKET, kill, unix.AF_INET6, unix.SOCK_DGRAM),
		))
	})
	t.Run("worker-loopback", func(t *testing.T) {
		prog := mustCompile(t, mustShipped(t, "worker-loopback"), Options{})
		runProbes(t, prog, append(common,
			call("socket AF_INET stream", unix.SYS_SOCKET, allow, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK),
			call("socket AF_INET6 dgram", unix.SYS_SOCKET, allow, unix.AF_INET6, unix.SOCK_DGRAM),
			call("socket AF_INET raw", unix.SYS_SOCKET, eperm, unix.AF_INET, unix.SOCK_RAW),
			call("socket AF_INET6 raw", unix.SYS_SOCKET, eperm, unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC),
			call("socket AF_NETLINK route", unix.SYS_SOCKET, allow, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE),
			call("socket AF_NETLINK audit", unix.SYS_SOCKET, eperm, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT),
		))
	})
	t.Run("agent", func(t *testing.T) {
		prog := mustCompile(t, mustShipped(t, "agent"), Options{})
		runProbes(t, prog, append(common,
			call("socket AF_INET stream", unix.SYS_SOCKET, allow, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK),
			call("socket AF_INET6 dgram", unix.SYS_SOCKET, allow, unix.AF_INET6, unix.SOCK_DGRAM),
			call("socket AF_INET raw", unix.SYS_SOCKET, eperm, unix.AF_INET, unix.SOCK_RAW),
			call("socket AF_NETLINK route", unix.SYS_SOCKET, eperm, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE),
			call("connect", unix.SYS_CONNECT, notify, 3, 0x1000, 16),
			call("sendmsg", unix.SYS_SENDMSG, notify, 3, 0x1000, 0),
			call("sendmmsg", unix.SYS_SENDMMSG, notify, 3, 0x1000, 2, 0),
			call("sendto with an address", unix.SYS_SENDTO, notify, 3, 0x1000, 5, 0, 0x2000, 16),
			call("sendto with an address, high bits only", unix.SYS_SENDTO, notify, 3, 0x1000, 5, 0, 1<<32, 16),
			call("send (sendto without an address)", unix.SYS_SENDTO, allow, 3, 0x1000, 5, 0, 0, 0),
			call("write", unix.SYS_WRITE, allow, 3, 0x1000, 5),
		))
	})
}

// TestIoctlLow32Exhaustive checks the worker's spelled-out ioctl allowlist
// against its intent for every request in the tty ioctl page and a spread of
// upper halves.
func TestIoctlLow32Exhaustive(t *testing.T) {
	prog := mustCompile(t, mustShipped(t, "worker"), Options{})
	for _, hi := range []uint64{0, 1 << 32, 0xffffffff << 32, 0x8000000000000000} {
		for lo := uint64(0x5400); lo < 0x5500; lo++ {
			want := allow
			if lo == unix.TIOCSTI || lo == unix.TIOCLINUX {
				want = eperm
			}
			got, err := Run(prog.Instructions, Data{Nr: unix.SYS_IOCTL, Arch: x86_64, Args: [6]uint64{0, hi | lo}})
			if err != nil {
				t.Fatal(err)
			}
			if ActionString(got) != want {
				t.Fatalf("ioctl %#x: %s, want %s", hi|lo, ActionString(got), want)
			}
		}
	}
}

func TestShadowedRuleIsAnError(t *testing.T) {
	for name, doc := range map[string]string{
		// libseccomp lets an unconditional rule swallow a conditional one
		// for the same syscall with a different action.
		"unconditional swallows conditional": `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
			{"names":["ioctl"],"action":"SCMP_ACT_ALLOW"},
			{"names":["ioctl"],"action":"SCMP_ACT_KILL_PROCESS","args":[{"index":1,"value":4294967295,"valueTwo":21522,"op":"SCMP_CMP_MASKED_EQ"}]}]}`,
		// A rule equal to the default is refused by libseccomp; it must not
		// hide that it is overruled.
		"same-as-default overruled": `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
			{"names":["ioctl"],"action":"SCMP_ACT_ALLOW"},
			{"names":["ioctl"],"action":"SCMP_ACT_ERRNO","args":[{"index":1,"value":21522,"op":"SCMP_CMP_EQ"}]}]}`,
		"impossible comparison": `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
			{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_LT"}]}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Compile(p, Options{})
			if !errors.Is(err, ErrShadowed) {
				t.Fatalf("Compile: %v, want ErrShadowed", err)
			}
			if !strings.Contains(err.Error(), "syscalls[") {
				t.Fatalf("error does not name the rule: %v", err)
			}
			if Check(p, Options{}) == nil {
				t.Fatal("Check accepted a profile Compile refuses")
			}
		})
	}
}

func TestSelection(t *testing.T) {
	doc := `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
		{"names":["getpid"],"action":"SCMP_ACT_ALLOW"},
		{"names":["mount"],"action":"SCMP_ACT_ALLOW","includes":{"caps":["CAP_SYS_ADMIN"]}},
		{"names":["umount2"],"action":"SCMP_ACT_ALLOW","excludes":{"caps":["CAP_SYS_ADMIN"]}},
		{"names":["ptrace"],"action":"SCMP_ACT_ALLOW","includes":{"minKernel":"4.8"}},
		{"names":["arch_prctl"],"action":"SCMP_ACT_ALLOW","includes":{"arches":["amd64","x32"]}},
		{"names":["gettid"],"action":"SCMP_ACT_ALLOW","excludes":{"arches":["amd64"]}},
		{"names":["uname"],"action":"SCMP_ACT_ALLOW","excludes":{"minKernel":"5.0"}}]}`
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	old := mustCompile(t, p, Options{})
	runProbes(t, old, []probe{
		call("mount (needs a capability: never held)", unix.SYS_MOUNT, eperm),
		call("umount2 (excluded by a capability: never held)", unix.SYS_UMOUNT2, allow),
		call("ptrace (unknown kernel is older than 4.8)", unix.SYS_PTRACE, eperm),
		call("arch_prctl (amd64 included)", unix.SYS_ARCH_PRCTL, allow),
		call("gettid (amd64 excluded)", unix.SYS_GETTID, eperm),
		call("uname (unknown kernel is not >= 5.0)", unix.SYS_UNAME, allow),
	})
	recent := mustCompile(t, p, Options{Kernel: KernelVersion{6, 18}})
	runProbes(t, recent, []probe{
		call("ptrace on 6.18", unix.SYS_PTRACE, allow),
		call("uname excluded on 6.18", unix.SYS_UNAME, eperm),
	})
}

func TestTooLong(t *testing.T) {
	var rules []string
	for i := 0; i < 700; i++ {
		var args []string
		for a := 0; a < 6; a++ {
			args = append(args, fmt.Sprintf(`{"index":%d,"value":%d,"op":"SCMP_CMP_EQ"}`, a, uint64(i)<<33|uint64(a+1)))
		}
		rules = append(rules, `{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[`+strings.Join(args, ",")+`]}`)
	}
	p, err := Parse([]byte(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[` + strings.Join(rules, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(p, Options{}); !errors.Is(err, ErrTooLong) {
		t.Fatalf("Compile: %v, want ErrTooLong", err)
	}
}

func TestRevalidatesHandBuiltProfiles(t *testing.T) {
	for name, p := range map[string]Profile{
		"bad default":  {DefaultAction: "nope"},
		"bad name":     {DefaultAction: ActAllow, Syscalls: []Rule{{Names: []string{"nope"}, Action: ActErrno}}},
		"bad index":    {DefaultAction: ActAllow, Syscalls: []Rule{{Names: []string{"read"}, Action: ActErrno, Args: []Arg{{Index: 9, Op: OpEqualTo}}}}},
		"bad op":       {DefaultAction: ActAllow, Syscalls: []Rule{{Names: []string{"read"}, Action: ActErrno, Args: []Arg{{Index: 0, Op: "x"}}}}},
		"bad arch":     {DefaultAction: ActAllow, Architectures: []Arch{"SCMP_ARCH_Z80"}},
		"spec allow":   {DefaultAction: ActAllow, Flags: []string{"SECCOMP_FILTER_FLAG_SPEC_ALLOW"}},
		"no names":     {DefaultAction: ActAllow, Syscalls: []Rule{{Action: ActErrno}}},
		"twice on arg": {DefaultAction: ActAllow, Syscalls: []Rule{{Names: []string{"read"}, Action: ActErrno, Args: []Arg{{Index: 0, Op: OpEqualTo}, {Index: 0, Op: OpEqualTo, Value: 1}}}}},
	} {
		if _, err := Compile(p, Options{}); err == nil {
			t.Errorf("%s: Compile accepted it", name)
		}
	}
}
