package seccomp

// Tests in this file load compiled programs into a real kernel. Each one
// re-executes the test binary as a child (TestMain dispatches on
// childModeEnv): the child locks its goroutine to one OS thread, sets
// PR_SET_NO_NEW_PRIVS and installs the programs with
// seccomp(SECCOMP_SET_MODE_FILTER) from pure Go, exactly as the launcher
// does, so a filter never touches the test process itself.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"golang.org/x/sys/unix"
)

const (
	childModeEnv  = "AUTONOMIC_SECCOMP_TEST_CHILD"
	childProgsEnv = "AUTONOMIC_SECCOMP_TEST_PROGRAMS"
	childArgEnv   = "AUTONOMIC_SECCOMP_TEST_ARG"
	childNEnv     = "AUTONOMIC_SECCOMP_TEST_N"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

// ---- child side ----

func childMain(mode string) int {
	runtime.LockOSThread() // the filter attaches to this thread (and, with TSYNC, its siblings)
	var progs [][]unix.SockFilter
	if paths := os.Getenv(childProgsEnv); paths != "" {
		for _, p := range strings.Split(paths, string(os.PathListSeparator)) {
			raw, err := os.ReadFile(p)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 90
			}
			ins, err := DecodeInstructions(raw)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 90
			}
			progs = append(progs, ins)
		}
	}
	switch mode {
	case "probe":
		if _, err := install(progs, unix.SECCOMP_FILTER_FLAG_TSYNC, false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 91
		}
		for _, p := range kernelProbes() {
			r, _, errno := unix.Syscall6(p.nr, p.args[0], p.args[1], p.args[2], p.args[3], p.args[4], p.args[5])
			if errno == 0 && p.closeFd {
				unix.Close(int(r))
			}
			fmt.Printf("%s %d\n", p.name, int(errno))
		}
		return 0
	case "x32":
		if _, err := install(progs, unix.SECCOMP_FILTER_FLAG_TSYNC, false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 91
		}
		unix.RawSyscall(0x40000000|unix.SYS_GETPID, 0, 0, 0)
		fmt.Println("survived an x32 syscall")
		return 0
	case "notify":
		return childNotify(progs)
	case "exec":
		var argv []string
		if err := json.Unmarshal([]byte(os.Getenv(childArgEnv)), &argv); err != nil {
			return 92
		}
		env := []string{}
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "AUTONOMIC_SECCOMP_TEST_") {
				env = append(env, e)
			}
		}
		if _, err := install(progs, unix.SECCOMP_FILTER_FLAG_TSYNC, false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 91
		}
		err := syscall.Exec(argv[0], argv, env) // execve from the filtered thread
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 93
	case "bench":
		return childBench(progs)
	}
	return 94
}

// install loads programs in order; the kernel runs all of them on every
// syscall and keeps the most restrictive answer. With listener, the last
// program is installed with SECCOMP_FILTER_FLAG_NEW_LISTENER and its fd
// returned (and no TSYNC: it combines with NEW_LISTENER only with
// TSYNC_ESRCH).
func install(progs [][]unix.SockFilter, flags uintptr, listener bool) (int, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("no_new_privs: %w", err)
	}
	fd := -1
	for i, ins := range progs {
		f := flags
		if listener && i == len(progs)-1 {
			f = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
		}
		fprog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
		r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, f, uintptr(unsafe.Pointer(&fprog)))
		runtime.KeepAlive(ins)
		if errno != 0 {
			return -1, fmt.Errorf("seccomp(SET_MODE_FILTER) #%d: %w", i, errno)
		}
		if f&unix.SECCOMP_FILTER_FLAG_NEW_LISTENER != 0 {
			fd = int(r)
		}
	}
	return fd, nil
}

type kprobe struct {
	name    string
	nr      uintptr
	args    [6]uintptr
	closeFd bool
}

// kernelProbes are system calls whose arguments make them harmless even if
// a filter wrongly let them through: NULL pointers, bad descriptors, bad
// magic numbers, or flag combinations the kernel rejects itself (EINVAL for
// CLONE_NEWUSER|CLONE_FS), so a failing test cannot damage the host.
func kernelProbes() []kprobe {
	const bad = ^uintptr(0) // fd -1
	k := func(name string, nr uintptr, args ...uintptr) kprobe {
		p := kprobe{name: name, nr: nr}
		copy(p.args[:], args)
		return p
	}
	return []kprobe{
		k("mount", unix.SYS_MOUNT),
		k("umount2", unix.SYS_UMOUNT2),
		k("pivot_root", unix.SYS_PIVOT_ROOT),
		k("fsopen", unix.SYS_FSOPEN),
		k("fsconfig", unix.SYS_FSCONFIG, bad),
		k("fsmount", unix.SYS_FSMOUNT, bad),
		k("fspick", unix.SYS_FSPICK, bad),
		k("open_tree", unix.SYS_OPEN_TREE, bad),
		k("move_mount", unix.SYS_MOVE_MOUNT, bad, 0, bad),
		k("mount_setattr", unix.SYS_MOUNT_SETATTR, bad),
		k("unshare", unix.SYS_UNSHARE, 0),
		k("setns", unix.SYS_SETNS, bad),
		k("ptrace", unix.SYS_PTRACE, unix.PTRACE_PEEKUSR),
		k("process_vm_readv", unix.SYS_PROCESS_VM_READV),
		k("process_vm_writev", unix.SYS_PROCESS_VM_WRITEV),
		k("bpf", unix.SYS_BPF, 0xffff),
		k("perf_event_open", unix.SYS_PERF_EVENT_OPEN, 0, 0, bad, bad),
		k("keyctl", unix.SYS_KEYCTL, 0xffff),
		k("add_key", unix.SYS_ADD_KEY),
		k("request_key", unix.SYS_REQUEST_KEY),
		k("userfaultfd", unix.SYS_USERFAULTFD, 0xffffffff),
		k("io_uring_setup", unix.SYS_IO_URING_SETUP),
		k("io_uring_enter", unix.SYS_IO_URING_ENTER, bad),
		k("io_uring_register", unix.SYS_IO_URING_REGISTER, bad),
		k("kexec_load", unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xffffffff),
		k("kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, bad, bad, 0, 0, 0xffffffff),
		k("init_module", unix.SYS_INIT_MODULE),
		k("finit_module", unix.SYS_FINIT_MODULE, bad),
		k("delete_module", unix.SYS_DELETE_MODULE),
		k("open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, bad),
		k("iopl", unix.SYS_IOPL, 0),
		k("ioperm", unix.SYS_IOPERM, 0, 0, 0),
		k("reboot", unix.SYS_REBOOT),
		k("swapon", unix.SYS_SWAPON),
		k("swapoff", unix.SYS_SWAPOFF),
		k("syslog", unix.SYS_SYSLOG, 0),
		k("acct", unix.SYS_ACCT, 1),
		k("quotactl", unix.SYS_QUOTACTL),
		k("quotactl_fd", unix.SYS_QUOTACTL_FD, bad),
		k("clone(CLONE_NEWUSER|CLONE_FS)", unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS),
		k("clone3", unix.SYS_CLONE3),
		k("ioctl(TIOCSTI|1<<32)", unix.SYS_IOCTL, bad, unix.TIOCSTI|1<<32),
		k("ioctl(TIOCLINUX)", unix.SYS_IOCTL, bad, unix.TIOCLINUX),
		// Allowed everywhere:
		k("getpid", unix.SYS_GETPID),
		k("ioctl(TCGETS)", unix.SYS_IOCTL, bad, unix.TCGETS),
		{name: "socket(AF_UNIX)", nr: unix.SYS_SOCKET, args: [6]uintptr{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, closeFd: true},
		{name: "socket(AF_INET)", nr: unix.SYS_SOCKET, args: [6]uintptr{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, closeFd: true},
	}
}

// seccompNotif and seccompNotifResp are struct seccomp_notif and
// struct seccomp_notif_resp.
type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Data  Data
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// childNotify installs the last program with a listener and answers its
// notifications from another (unfiltered) thread the way the monitor does:
// refuse with EPERM, count the evidence.
func childNotify(progs [][]unix.SockFilter) int {
	fd, err := install(progs, 0, true)
	if err != nil || fd < 0 {
		fmt.Fprintln(os.Stderr, "install:", err)
		return 91
	}
	var seen atomic.Int32
	go func() {
		for {
			var n seccompNotif
			if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n))); errno != 0 {
				if errno == unix.EINTR {
					continue
				}
				return
			}
			if n.Data.Nr == unix.SYS_SOCKET {
				seen.Add(1)
			}
			resp := seccompNotifResp{ID: n.ID, Error: -int32(unix.EPERM)}
			unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
		}
	}()
	for _, dom := range []uintptr{unix.AF_INET, unix.AF_INET6, unix.AF_INET} {
		_, _, errno := unix.Syscall(unix.SYS_SOCKET, dom, unix.SOCK_STREAM, 0)
		fmt.Printf("socket(%d) %d\n", dom, int(errno))
	}
	_, _, errno := unix.Syscall(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0)
	fmt.Printf("socket(AF_UNIX) %d\n", int(errno))
	fmt.Printf("notifications %d\n", seen.Load())
	return 0
}

// ---- parent side ----

func requireSeccomp(t testing.TB) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		privileged.Skip(t, "kernel tests are written for x86_64")
	}
	if v, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil || v != 0 {
		privileged.Skip(t, "seccomp unavailable or this process is already filtered")
	}
}

// programFiles writes programs where a child can read them.
func programFiles(t testing.TB, progs ...Program) string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, p := range progs {
		path := filepath.Join(dir, fmt.Sprintf("%d.bpf", i))
		if err := os.WriteFile(path, p.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	return strings.Join(paths, string(os.PathListSeparator))
}

func child(t testing.TB, mode, progs string, extra ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childProgsEnv+"="+progs)
	cmd.Env = append(cmd.Env, extra...)
	return cmd
}

func parseResults(t *testing.T, out []byte) map[string]int {
	t.Helper()
	res := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		n, err := strconv.Atoi(line[i+1:])
		if err != nil {
			t.Fatalf("bad child line %q", line)
		}
		res[line[:i]] = n
	}
	return res
}

func TestKernelEnforcesFloor(t *testing.T) {
	requireSeccomp(t)
	floor := mustCompile(t, mustShipped(t, "floor"), Options{})
	allowAll, err := Parse([]byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`))
	if err != nil {
		t.Fatal(err)
	}
	worker := mustCompile(t, mustShipped(t, "worker"), Options{})
	for _, cfg := range []struct {
		name   string
		progs  []Program
		inetIs syscall.Errno // what socket(AF_INET) gets
	}{
		{"floor", []Program{floor}, 0},
		// The floor cannot be widened by a profile whose default is ALLOW.
		{"allow-all+floor", []Program{floor, mustCompile(t, allowAll, Options{})}, 0},
		// NOTIFY with no listener attached answers ENOSYS.
		{"worker+floor", []Program{floor, worker}, unix.ENOSYS},
		{"worker", []Program{worker}, unix.ENOSYS},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			out, err := child(t, "probe", programFiles(t, cfg.progs...)).CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			res := parseResults(t, out)
			for _, p := range kernelProbes() {
				got, ok := res[p.name]
				if !ok {
					t.Errorf("%s: no result", p.name)
					continue
				}
				var want syscall.Errno
				switch p.name {
				case "clone3":
					want = unix.ENOSYS
				case "getpid", "socket(AF_UNIX)":
					want = 0
				case "ioctl(TCGETS)":
					want = unix.EBADF // allowed: the kernel saw the bad fd
				case "socket(AF_INET)":
					want = cfg.inetIs
				default:
					want = unix.EPERM
				}
				if syscall.Errno(got) != want {
					t.Errorf("%s: errno %d (%v), want %d (%v)", p.name, got, syscall.Errno(got), int(want), want)
				}
			}
		})
	}
}

func TestKernelKillsX32(t *testing.T) {
	requireSeccomp(t)
	floor := mustCompile(t, mustShipped(t, "floor"), Options{})
	out, err := child(t, "x32", programFiles(t, floor)).CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("child was not killed: %v\n%s", err, out)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != unix.SIGSYS {
		t.Fatalf("child ended with %v, want death by SIGSYS (SECCOMP_RET_KILL_PROCESS)\n%s", ws, out)
	}
}

func TestKernelNotifyListener(t *testing.T) {
	requireSeccomp(t)
	floor := mustCompile(t, mustShipped(t, "floor"), Options{})
	worker := mustCompile(t, mustShipped(t, "worker"), Options{})
	out, err := child(t, "notify", programFiles(t, floor, worker)).CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	res := parseResults(t, out)
	for _, k := range []string{"socket(2)", "socket(10)"} {
		if syscall.Errno(res[k]) != unix.EPERM {
			t.Errorf("%s: errno %d, want EPERM from the listener", k, res[k])
		}
	}
	if res["socket(AF_UNIX)"] != 0 {
		t.Errorf("AF_UNIX socket refused: errno %d", res["socket(AF_UNIX)"])
	}
	if res["notifications"] != 3 {
		t.Errorf("listener saw %d notifications, want exactly 3 (one per attempt)\n%s", res["notifications"], out)
	}
}

// workloadScript is the coding workload the worker profile exists for.
const workloadScript = `set -eu
cd "$WORK"
export HOME="$WORK" GIT_CONFIG_NOSYSTEM=1 GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
git init -q repo
cd repo
git config user.email worker@example.invalid
git config user.name worker
printf 'int main(void) { return 0; }\n' > hello.c
printf 'hello: hello.c\n\tgcc -O1 -o hello hello.c\n' > Makefile
make -s
./hello
printf 'module example.invalid/w\n\ngo 1.26\n' > go.mod
mkdir cmd && printf 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("go ok") }\n' > cmd/main.go
go build -o gobin ./cmd
./gobin
ls -la | sort | wc -l > /dev/null
sha256sum hello.c | cut -c1-64 > sum.txt
tar -cf ../src.tar hello.c Makefile && tar -tf ../src.tar > /dev/null
mkdir -p sub && cp hello.c sub/ && mv sub/hello.c sub/h.c && rm -r sub
echo "$(( 6 * 7 ))" | grep -q 42
(sleep 0.01 & wait)
git add hello.c Makefile go.mod cmd/main.go sum.txt
git commit -qm "workload under seccomp"
git log --oneline | grep -q "workload under seccomp"
echo WORKLOAD-OK
`

func TestWorkloadRunsUnderProfiles(t *testing.T) {
	requireSeccomp(t)
	var tools []string
	for _, tool := range []string{"bash", "git", "make", "gcc", "go", "sha256sum", "tar"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			privileged.Skip(t, "workload tool missing: "+tool)
		}
		tools = append(tools, path)
	}
	floor := mustCompile(t, mustShipped(t, "floor"), Options{})
	docker, _ := dockerDefault(t)
	for _, cfg := range []struct {
		name  string
		progs []Program
	}{
		{"worker+floor", []Program{floor, mustCompile(t, mustShipped(t, "worker"), Options{})}},
		{"worker-loopback+floor", []Program{floor, mustCompile(t, mustShipped(t, "worker-loopback"), Options{})}},
		{"docker-default+floor", []Program{floor, mustCompile(t, docker, Options{Kernel: hostKernel()})}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			argv, _ := json.Marshal([]string{tools[0], "-c", workloadScript})
			cmd := child(t, "exec", programFiles(t, cfg.progs...), childArgEnv+"="+string(argv), "WORK="+t.TempDir())
			start := time.Now()
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "WORKLOAD-OK") {
				t.Fatalf("workload failed under %s: %v\n%s", cfg.name, err, out)
			}
			t.Logf("%s: workload ran in %v", cfg.name, time.Since(start).Round(time.Millisecond))
		})
	}
}
