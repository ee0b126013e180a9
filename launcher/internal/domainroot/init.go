package domainroot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/autonomic-kernel/autonomic/launcher/internal/confine"
	"github.com/autonomic-kernel/autonomic/launcher/internal/wire"
	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

// newRoot is where the init assembles the domain's root inside its own
// mount namespace, on a tmpfs of its own; nothing here is visible to the host.
const newRoot = "/tmp/.autonomic-root"

// WorkerHome is the worker's HOME inside its domain.
const WorkerHome = "/tmp/home"

// RunInit is PID 1 of a domain. It finishes the mounts, pivots into the
// rootfs, starts the worker stage and reaps until the worker exits. When it
// exits, the kernel kills every process left in its PID namespace.
func RunInit() int {
	// Not dumpable: no process of the domain may ptrace us or open our
	// /proc entries (exe, mem, fds) even though it shares our user namespace.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	if os.Getpid() != 1 {
		return 1
	}
	// The monitor's descriptors arrive without close-on-exec: only what a
	// child is handed by name (ExtraFiles) may reach it, or the notifier
	// would hold the exec channel open and hide the stage's exec.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 1
	}
	// The notifier (a domain whose profile notifies) starts first, while
	// the init still has a bounding set: its one capability needs it.
	if notifier, ok := isSocket(fdNotifier); ok {
		err := startNotifier(notifier)
		notifier.Close()
		if err != nil {
			return 1
		}
	}
	// The bounding set goes first, while the monitor still prepares the
	// mounts: it costs a stop-the-world per capability, and the init never
	// execs, so it needs none of it (the stage's user namespace starts with
	// a bounding set of its own, which the stage drops). A failure is
	// reported where every other drop's is.
	bounded := dropBoundingSet()
	ctl := os.NewFile(3, "ctl")
	execCh := os.NewFile(4, "exec")
	b, fds, err := wire.RecvSized(ctl, time.Now().Add(wire.ActionDeadline), 256<<10)
	if err != nil {
		return 1
	}
	var spec wire.Spec
	if err := json.Unmarshal(b, &spec); err != nil || len(fds) != wire.FdSockets+len(spec.Sockets) {
		_ = wire.SendReply(ctl, wire.Reply{Error: string(protocol.CodeNamespaceFailed)}, nil)
		return 1
	}
	if err := assembleRoot(fds, &spec); err != nil {
		_ = wire.SendReply(ctl, wire.Reply{Error: string(protocol.AsWire(err).Code)}, nil)
		return 1
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	_ = unix.Sethostname([]byte("domain"))
	_ = loopbackUp()

	stage, execed, err := startStage(&spec, execCh)
	execCh.Close()
	if err == nil {
		err = bounded
	}
	if err == nil {
		err = dropPrivileges()
	}
	// Ready means the worker's execve happened: a stage that died before
	// it (a profile that kills execve) is an exec failure, never a start.
	if err == nil {
		err = awaitStageExec(execed, stage)
	}
	if err != nil {
		_ = wire.SendReply(ctl, wire.Reply{Error: string(protocol.CodeExecFailed)}, nil)
		return 1
	}
	_ = wire.SendReply(ctl, wire.Reply{Ready: true}, nil)

	// The monitor closing its end means it died: take the domain down.
	go func() {
		for {
			if _, _, err := wire.RecvRaw(ctl, time.Time{}); err != nil {
				os.Exit(137)
			}
		}
	}()
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, 0, &ru)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 1
		}
		if pid != stage {
			continue // an orphan reparented to us: reap and go on
		}
		r := wire.Reply{Exited: true, MaxRSS: ru.Maxrss}
		if ws.Signaled() {
			r.Signal = int(ws.Signal())
		} else {
			r.Code = ws.ExitStatus()
		}
		_ = wire.SendReply(ctl, r, nil)
		return 0
	}
}

// assembleRoot builds the domain's filesystem from the descriptors the
// monitor sent. Every host object arrives as a descriptor (a detached mount
// or an open directory); no host path is resolved by name here.
func assembleRoot(fds []int, spec *wire.Spec) error {
	fail := func(step string, err error) error {
		return protocol.Errorf(protocol.CodeMountFailed, "%s: %w", step, err)
	}
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("make private", err)
	}
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size=64k"); err != nil {
		return fail("staging tmpfs", err)
	}
	if err := unix.Mkdir(newRoot, 0o700); err != nil {
		return fail("staging dir", err)
	}
	if err := unix.MoveMount(fds[wire.FdRootfs], "", unix.AT_FDCWD, newRoot, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fail("attach rootfs", err)
	}
	at := func(p string) string { return newRoot + p }
	nosuid := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount("proc", at("/proc"), "proc", nosuid|unix.MS_NOEXEC, ""); err != nil {
		return fail("proc", err)
	}
	if err := maskProc(at("/proc")); err != nil {
		return fail("mask proc", err)
	}
	if err := unix.Mount("tmpfs", at("/tmp"), "tmpfs", nosuid, fmt.Sprintf("mode=1777,size=%d", spec.TmpBytes)); err != nil {
		return fail("tmp", err)
	}
	// The worker's HOME: agents keep state there, so it is on the bounded
	// /tmp, never under /workspace, whose changes are harvested.
	if err := errors.Join(os.Mkdir(at(WorkerHome), 0o700), os.Chown(at(WorkerHome), int(spec.UID), int(spec.GID))); err != nil {
		return fail("home", err)
	}
	if err := minimalDev(at("/dev")); err != nil {
		return fail("dev", err)
	}
	if err := unix.Mount("tmpfs", at("/run"), "tmpfs", nosuid|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fail("run", err)
	}
	if err := os.MkdirAll(at("/run/autonomic/.lower"), 0o755); err != nil {
		return fail("run dirs", err)
	}
	if err := os.Mkdir(at("/run/autonomic/.layers"), 0o755); err != nil {
		return fail("run dirs", err)
	}
	for i, name := range spec.Sockets {
		sockPath := at("/run/autonomic/" + name)
		if err := os.WriteFile(sockPath, nil, 0o600); err != nil {
			return fail("socket mountpoint", err)
		}
		if err := unix.MoveMount(fds[wire.FdSockets+i], "", unix.AT_FDCWD, sockPath, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fail("attach socket", err)
		}
	}
	// The overlay keeps private clones of its layers, so the lower's
	// staging mount is detached again right after.
	lowerAt := at("/run/autonomic/.lower")
	if err := unix.MoveMount(fds[wire.FdLower], "", unix.AT_FDCWD, lowerAt, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fail("attach lower", err)
	}
	layersAt := at("/run/autonomic/.layers")
	if err := unix.MoveMount(fds[wire.FdLayers], "", unix.AT_FDCWD, layersAt, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fail("attach layers", err)
	}
	// The domain directory holds layers/ (a bounded tmpfs) or, on hosts
	// whose tmpfs cannot hold overlay's xattrs, upper/ and work/ itself.
	layers := layersAt
	if _, err := os.Stat(layersAt + "/layers"); err == nil {
		layers += "/layers"
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work,userxattr", lowerAt, layers, layers)
	if err := unix.Mount("overlay", at("/workspace"), "overlay", nosuid, opts); err != nil {
		return fail("overlay", err)
	}
	for _, p := range []string{lowerAt, layersAt} {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			return fail("detach staging", err)
		}
		_ = unix.Rmdir(p)
	}
	if err := unix.Mount("", at("/run"), "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail("seal run", err)
	}
	// pivot_root(".", ".") stacks the old root under the new one; the
	// detach then drops every host mount from this namespace.
	if err := unix.Chdir(newRoot); err != nil {
		return fail("chdir", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fail("pivot_root", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fail("detach old root", err)
	}
	return unix.Chdir("/")
}

// dropBoundingSet empties the bounding set of every thread (and so of
// every thread the runtime starts later). It leaves the effective and
// permitted sets alone: the init still mounts and maps the stage's ids.
func dropBoundingSet() error {
	for c := uintptr(0); ; c++ {
		err := confine.AllThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0)
		if err == unix.EINVAL {
			return nil // past the kernel's last capability
		}
		if err != nil {
			return err
		}
	}
}

// dropPrivileges leaves the init, which from here on only reaps and
// reports, with no capability in any set (the bounding set is already
// empty), on every thread, and no way to gain one (no_new_privs). It stays
// the domain's uid 0, which owns nothing of the host: the rootfs is not
// idmapped.
func dropPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // effective, permitted and inheritable: empty
	if err := confine.AllThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return err
	}
	if err := confine.AllThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return err
	}
	return confine.AllThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
}

// maskProc hides the procfs entries that describe the host rather than the
// domain, and makes the kernel's tunables read-only, as container runtimes
// do. Most are root-only on the host anyway; this is defence in depth.
func maskProc(proc string) error {
	for _, f := range []string{"kcore", "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "kallsyms", "kmsg", "sysrq-trigger"} {
		if _, err := os.Stat(proc + "/" + f); err != nil {
			continue // not in this kernel's build
		}
		if err := unix.Mount("/dev/null", proc+"/"+f, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for _, d := range []string{"acpi", "scsi", "bus", "irq", "fs", "sys"} {
		p := proc + "/" + d
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	}
	return nil
}

// minimalDev is a tmpfs with bind mounts of the five harmless host devices;
// a user namespace cannot mknod, and needs no other device.
func minimalDev(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, name := range []string{"null", "zero", "full", "random", "urandom"} {
		if err := os.WriteFile(dev+"/"+name, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+name, dev+"/"+name, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return err
		}
	}
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// loopbackUp raises lo in the domain's empty network namespace; there is no
// other interface, so this reaches nothing outside the domain.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// fdNotifier is where the monitor passes the notifier's channel, when the
// domain's profile notifies.
const fdNotifier = 5

func isSocket(fd int) (*os.File, bool) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, false
	}
	return os.NewFile(uintptr(fd), "notify"), true
}

// startNotifier starts the domain's notifier (runNotifier): this binary
// again, as the domain's root, in the domain's namespaces and cgroup; the
// init reaps it with every other orphan, and the PID namespace ends it
// with the init.
func startNotifier(ch *os.File) error {
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{wire.NotifyArg0}, Env: wire.ReexecEnv, ExtraFiles: []*os.File{ch}}
	return cmd.Start()
}

// startStage starts the worker stage: this binary again, in a new session,
// with the spec on fd 3 and the exec channel on fd 4, in a user namespace
// nested in the domain's (the same ids) and a mount namespace it owns. The
// kernel copies the domain's mounts into it and, the new owner being less
// privileged, locks them: no process there, the domain's uid 0 included,
// can clear a read-only, nosuid or noexec flag or unmount a mask.
//
// The stage also holds fd 5, the write end of a pipe whose read end it
// returns (execed): it closes on the stage's exec or its death.
func startStage(spec *wire.Spec, execCh *os.File) (int, *os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	er, ew, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer ew.Close()
	devnull, err := os.Open("/dev/null")
	if err != nil {
		return 0, nil, err
	}
	defer devnull.Close()
	cmd := &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{wire.StageArg0}, Env: wire.ReexecEnv,
		Stdin: devnull, Stdout: os.Stdout, Stderr: os.Stderr,
		ExtraFiles: []*os.File{pr, execCh, ew},
		SysProcAttr: &syscall.SysProcAttr{
			Setsid: true, Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: int(spec.IDs)}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: int(spec.IDs)}},
			GidMappingsEnableSetgroups: true, // the stage drops its groups
		},
	}
	err = cmd.Start()
	pr.Close()
	if err != nil {
		pw.Close()
		er.Close()
		return 0, nil, err
	}
	b, _ := json.Marshal(spec)
	_, err = pw.Write(b)
	pw.Close()
	if err != nil {
		er.Close()
		return 0, nil, errors.Join(err, cmd.Process.Kill())
	}
	return cmd.Process.Pid, er, nil
}

// stageComm is the name the stage gives itself. execve names a process
// after its file's base name, which never holds a '/': a dead stage still
// carrying this name never reached the worker's exec.
const stageComm = "autonomic/stage"

// pfExiting is PF_EXITING in /proc/<pid>/stat's flags: set as a task
// starts to exit, before its descriptors are closed.
const pfExiting = 0x4

// awaitStageExec waits for the stage's exec pipe to close and tells why.
// execve closes it (close-on-exec) only past its point of no return, after
// the new program is mapped; the kernel renames the task right after, before
// any signal can end it. So a stage whose pipe closed while it is exiting
// and still named stageComm died before the exec (killed by its profile or
// failed); any other state is a worker that runs, or ran.
func awaitStageExec(execed *os.File, stage int) error {
	defer execed.Close()
	_ = execed.SetReadDeadline(time.Now().Add(wire.ActionDeadline))
	var b [1]byte
	if n, err := execed.Read(b[:]); n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("stage exec pipe: %d %w", n, err)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", stage))
	if err != nil {
		return err // only this init reaps the stage: it cannot be gone
	}
	s := string(stat)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return errors.New("stage stat unreadable")
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 7 {
		return errors.New("stage stat unreadable")
	}
	flags, err := strconv.ParseUint(fields[6], 10, 64)
	if err != nil {
		return err
	}
	if s[open+1:end] == stageComm && flags&pfExiting != 0 {
		return errors.New("the stage died before its exec")
	}
	return nil
}
