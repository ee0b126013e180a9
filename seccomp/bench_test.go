package seccomp

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Per-syscall overhead of the compiled programs, measured in a re-executed
// child so the filters never touch the benchmark process. The child runs the
// operation b.N times on one locked thread under the configuration's
// programs and reports the loop's own duration, which replaces ns/op (the
// spawn is not part of the figure). insns reports the instructions the
// kernel may run: the sum over the installed programs.

func BenchmarkSyscallGetpid(b *testing.B)      { benchSyscall(b, "getpid") }
func BenchmarkSyscallRead1(b *testing.B)       { benchSyscall(b, "read1") }
func BenchmarkSyscallOpenatClose(b *testing.B) { benchSyscall(b, "openat+close") }

func benchSyscall(b *testing.B, op string) {
	requireSeccomp(b)
	floor := mustCompile(b, mustShipped(b, "floor"), Options{})
	worker := mustCompile(b, mustShipped(b, "worker"), Options{})
	docker, _ := dockerDefault(b)
	dockerProg := mustCompile(b, docker, Options{Kernel: dockerKernel})
	for _, cfg := range []struct {
		name  string
		progs []Program
	}{
		{"none", nil},
		{"floor", []Program{floor}},
		{"worker", []Program{worker}},
		{"worker+floor", []Program{floor, worker}},
		{"docker-default", []Program{dockerProg}},
	} {
		b.Run(cfg.name, func(b *testing.B) {
			insns := 0
			for _, p := range cfg.progs {
				insns += p.Count
			}
			out, err := child(b, "bench", programFiles(b, cfg.progs...), childArgEnv+"="+op, childNEnv+"="+strconv.Itoa(b.N)).CombinedOutput()
			if err != nil {
				b.Fatalf("child: %v\n%s", err, out)
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
			if err != nil {
				b.Fatalf("child said %q", out)
			}
			b.ReportMetric(float64(ns)/float64(b.N), "ns/op")
			b.ReportMetric(float64(insns), "insns")
		})
	}
}

func childBench(progs [][]unix.SockFilter) int {
	op := os.Getenv(childArgEnv)
	n, err := strconv.Atoi(os.Getenv(childNEnv))
	if err != nil || n <= 0 {
		return 95
	}
	zero, err := unix.Open("/dev/zero", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 96
	}
	path, _ := unix.BytePtrFromString("/dev/null")
	var buf [1]byte
	if len(progs) > 0 {
		if _, err := install(progs, unix.SECCOMP_FILTER_FLAG_TSYNC, false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 91
		}
	}
	var do func() bool
	switch op {
	case "getpid":
		do = func() bool { _, _, e := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0); return e == 0 }
	case "read1":
		do = func() bool {
			r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(zero), uintptr(unsafe.Pointer(&buf[0])), 1)
			return e == 0 && r == 1
		}
	case "openat+close":
		do = func() bool {
			fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(unix.AT_FDCWD&0xffffffffffffffff), uintptr(unsafe.Pointer(path)), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
			if e != 0 {
				return false
			}
			_, _, e = unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
			return e == 0
		}
	default:
		return 97
	}
	for i := 0; i < 1000; i++ { // warm caches and branch predictors
		if !do() {
			return 98
		}
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if !do() {
			return 98
		}
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
}
