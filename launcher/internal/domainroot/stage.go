package domainroot

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"github.com/autonomic-kernel/autonomic/launcher/internal/confine"
	"github.com/autonomic-kernel/autonomic/launcher/internal/wire"
	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

// RunStage is the worker's last stage before its own program: this binary,
// inside the domain, as the domain's root. Go's ForkExec has no hook
// between fork and exec, so everything that must happen on the exec'ing
// thread happens here, on one locked thread, in this order: drop the
// bounding set and groups, become the worker, forbid new privileges,
// install the seccomp floor and the profile, close every inherited
// descriptor, execve. Its rlimits were set on the init by the launcher.
func RunStage() int {
	runtime.LockOSThread()
	// Named so that the init can tell a stage that died before its exec
	// from a worker (awaitStageExec); fd 5 closes on either.
	_ = os.WriteFile("/proc/self/comm", []byte(stageComm), 0)
	execCh := os.NewFile(4, "exec")
	fail := func(code protocol.Code) int {
		_ = wire.SendReply(execCh, wire.Reply{Error: string(code)}, nil)
		return 127
	}
	b, err := io.ReadAll(io.LimitReader(os.NewFile(3, "spec"), 1<<20))
	if err != nil {
		return fail(protocol.CodeExecFailed)
	}
	unix.Close(3)
	var spec wire.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fail(protocol.CodeExecFailed)
	}
	// Resolve the program with the worker's PATH, inside the domain's root.
	prog, err := lookPath(spec.Argv[0], spec.Env)
	if err != nil {
		return fail(protocol.CodeExecFailed)
	}
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err == unix.EINVAL {
			break // past the kernel's last capability
		}
	}
	// syscall's Set* run on every thread (AllThreadsSyscall), so no Go
	// thread keeps root's ids; setuid from 0 clears every capability set.
	if syscall.Setgroups([]int{}) != nil ||
		syscall.Setresgid(int(spec.GID), int(spec.GID), int(spec.GID)) != nil ||
		syscall.Setresuid(int(spec.UID), int(spec.UID), int(spec.UID)) != nil {
		return fail(protocol.CodeExecFailed)
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(protocol.CodeExecFailed)
	}
	if err := unix.Chdir(spec.Cwd); err != nil {
		return fail(protocol.CodeExecFailed)
	}
	// Seccomp goes last: after it, only what the filters allow is possible,
	// and the next syscalls (futex, close_range, execve) must be allowed.
	// The floor goes to every thread; the profile only to this one, the
	// thread that execs (execve discards the others).
	if _, err := confine.InstallFilter(spec.Floor, unix.SECCOMP_FILTER_FLAG_TSYNC); err != nil {
		return fail(protocol.CodeSeccompFailed)
	}
	if spec.Profile != nil {
		var flags uintptr
		if spec.Notify {
			// WAIT_KILLABLE_RECV (5.19, the launcher's floor): once the
			// monitor has received a call, only a fatal signal interrupts
			// it, so a received call is answered, and counted, once.
			flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
		}
		listener, err := confine.InstallFilter(spec.Profile, flags)
		if err != nil {
			return fail(protocol.CodeSeccompFailed)
		}
		if spec.Notify {
			// The listener leaves the domain: the monitor, outside, answers
			// and records every notified call; the worker never holds it.
			// It leaves from another thread, under the floor only: the
			// profile may notify sendmsg, which nobody would answer yet.
			sent := make(chan error)
			go func() { sent <- wire.SendReply(execCh, wire.Reply{Listener: true}, []int{listener}) }()
			err := <-sent
			unix.Close(listener)
			if err != nil {
				return fail(protocol.CodeSeccompFailed)
			}
		}
	}
	// Only 0-2 survive the exec; the exec channel closing is the monitor's
	// signal that the worker runs.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail(protocol.CodeExecFailed)
	}
	_ = unix.Exec(prog, spec.Argv, spec.Env)
	return fail(protocol.CodeExecFailed)
}

func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "PATH="); ok {
			os.Setenv("PATH", p)
		}
	}
	return exec.LookPath(name)
}
