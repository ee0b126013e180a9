package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/launcher/internal/floor"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// create builds a domain and then stays as its monitor. The order below is
// the order of privilege: resolve every host object first (failures there
// leave nothing behind), then claim state, then clone, then mount, then
// hand over to the unprivileged worker.
func (l *launcher) create() error {
	r := l.req
	lim, err := l.effectiveLimits()
	if err != nil {
		return err
	}
	env, err := l.workerEnv()
	if err != nil {
		return err
	}
	var profile []byte
	if r.Seccomp != nil {
		if profile, err = r.Seccomp.Decode(); err != nil {
			return err
		}
	}
	notify := profile != nil && hostSeccompActions()["user_notif"]
	if profile != nil && !notify && programUsesNotify(profile) {
		return protocol.Errorf(protocol.CodeSeccompUnsupported, "host lacks user notification")
	}

	// 1. Resolve: rootfs (by manifest digest), workspace, socket, checkpoint.
	rootfs, digest, err := l.openRootfs()
	if err != nil {
		return err
	}
	defer unix.Close(rootfs)
	if digest != l.cfg.RootfsManifestSHA256 {
		return protocol.E(protocol.CodeRootfsMismatch)
	}
	lower, err := l.openWorkspace(r.WorkspaceID)
	if err != nil {
		return err
	}
	defer unix.Close(lower)
	sock := -1
	if r.BrokerSocket != "" {
		if sock, err = l.openBrokerSocket(r.BrokerSocket); err != nil {
			return err
		}
		defer unix.Close(sock)
	}
	var ckpt *os.File
	if r.Checkpoint != "" {
		if ckpt, err = l.openCheckpoint(r.Checkpoint); err != nil {
			return err
		}
		defer ckpt.Close()
	}

	// 2. Claim: the domain directory is the lock on the id; from here on
	// every failure destroys whatever exists, which destroy tolerates.
	// 0711: the domain's root (an unmapped host uid) must traverse it to
	// reach upper/ and work/; domains/ itself stays 0700.
	if err := unix.Mkdirat(l.state.domains, r.DomainID, 0o711); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return protocol.E(protocol.CodeDomainExists)
		}
		return protocol.Errorf(protocol.CodeLauncherFailed, "mkdir domain: %w", err)
	}
	run := &domainRun{domfd: -1, cgfd: -1, listener: -1}
	if err := l.build(run, r, lim, env, profile, notify, rootfs, lower, sock, ckpt, digest); err != nil {
		// Clean up only the directory this create made, not one a destroy
		// and a new create of the id may have put there meanwhile.
		var st unix.Stat_t
		bound := &st
		if run.domfd < 0 || unix.Fstat(run.domfd, &st) != nil {
			bound = nil
		}
		run.release() // drops the domain lock, so destroy can take it
		_, _ = l.destroyDomain(r.DomainID, time.Now().Add(actionDeadline), bound)
		return err
	}
	return l.monitor(run)
}

// domainRun is a started domain as the monitor sees it.
type domainRun struct {
	domfd, cgfd int
	ctl, execCh *os.File
	listener    int
	initPID     int
	done        chan waitResult
	meta        domainMeta
}

type waitResult struct {
	status unix.WaitStatus
	rusage unix.Rusage
}

// release closes what a failed build holds; the init, if any, sees its
// channel close and exits.
func (run *domainRun) release() {
	closeAll(run.domfd, run.cgfd, run.listener)
	for _, f := range []*os.File{run.ctl, run.execCh} {
		if f != nil {
			f.Close()
		}
	}
}

func (l *launcher) build(run *domainRun, r *protocol.LauncherRequest, lim limitSet, env []string, profile []byte, notify bool,
	rootfs, lower, sock int, ckpt *os.File, digest string) error {
	domfd, err := openDirBeneath(l.state.domains, r.DomainID)
	if errors.Is(err, unix.ENOENT) {
		// A destroy removed it between our mkdir and this open.
		return protocol.Errorf(protocol.CodeDomainNotFound, "destroyed while being created")
	}
	if err != nil {
		return err
	}
	run.domfd = domfd
	if err := lockDomain(domfd, l.deadline); err != nil {
		return err
	}
	// A destroy may have removed the directory between our mkdir and our
	// lock; building inside an unlinked directory would leak the domain.
	var st unix.Stat_t
	if err := unix.Fstat(domfd, &st); err != nil || st.Nlink == 0 {
		return protocol.Errorf(protocol.CodeDomainNotFound, "destroyed while being created")
	}
	slot, err := l.allocSlot(r.DomainID)
	if err != nil {
		return err
	}
	base := l.uidBase(slot)
	run.meta = domainMeta{Generation: r.Generation, Slot: slot, UIDBase: base, OneShot: r.OneShot, RootfsDigest: digest}
	mb, _ := json.Marshal(run.meta)
	if err := writeFileAt(domfd, "meta.json", mb, 0o600); err != nil {
		return protocol.Errorf(protocol.CodeLauncherFailed, "meta: %w", err)
	}

	// Upper belongs to the worker (it is the merged root of /workspace);
	// work belongs to the domain's root, which mounts the overlay.
	wuid, wgid := base+l.cfg.WorkerUID, base+l.cfg.WorkerGID
	for _, d := range []struct {
		name     string
		mode     uint32
		uid, gid uint32
	}{{"upper", 0o755, wuid, wgid}, {"work", 0o700, base, base}} {
		if err := unix.Mkdirat(domfd, d.name, d.mode); err != nil {
			return protocol.Errorf(protocol.CodeLauncherFailed, "mkdir %s: %w", d.name, err)
		}
		if err := unix.Fchownat(domfd, d.name, int(d.uid), int(d.gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return protocol.Errorf(protocol.CodeLauncherFailed, "chown %s: %w", d.name, err)
		}
	}
	upper, err := openDirBeneath(domfd, "upper")
	if err != nil {
		return err
	}
	defer unix.Close(upper)
	if ckpt != nil {
		if _, err := l.extract(ckpt, upper, base); err != nil {
			return err
		}
	}

	// 3. cgroup: the init is born inside it (CLONE_INTO_CGROUP), so no
	// process of the domain ever exists outside it, not even briefly.
	parent, err := l.openCgroupParent()
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	if run.cgfd, err = makeCgroup(parent, domfd, r.DomainID); err != nil {
		return err
	}
	limits := applyLimits(parent, run.cgfd, lim)

	// 4. Clone the init into new user, mount, pid, net, ipc, uts and cgroup
	// namespaces. Its uid 0 is the first id of this domain's private range.
	ctlMon, ctlInit, err := seqpacketPair()
	if err != nil {
		return err
	}
	execMon, execInit, err := seqpacketPair()
	if err != nil {
		return err
	}
	run.ctl, run.execCh = ctlMon, execMon
	if err := l.startInit(run, base, ctlInit, execInit); err != nil {
		return err
	}
	ctlInit.Close()
	execInit.Close()

	// 5. Mounts, prepared here as detached trees and attached by the init
	// inside its own namespace: the rootfs read-only and idmapped so its
	// root-owned files show as the domain's root, the workspace idmapped
	// so the kernel's clone shows as the worker's own files (copy-up works).
	fds, err := l.prepareMounts(run.initPID, base, rootfs, lower, domfd, sock)
	if err != nil {
		return err
	}
	spec := initSpec{
		Argv: r.Argv, Env: env, Cwd: r.Cwd, UID: l.cfg.WorkerUID, GID: l.cfg.WorkerGID,
		NProc: lim.NProc, NoFile: lim.NoFile, Floor: floorBytes(), Profile: profile, Notify: notify, HasSocket: sock >= 0,
	}
	if spec.Cwd == "" {
		spec.Cwd = "/workspace"
	}
	sb, _ := json.Marshal(spec)
	err = sendMsg(run.ctl, sb, fds)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		return protocol.Errorf(protocol.CodeNamespaceFailed, "send spec: %w", err)
	}

	// 6. Wait for the worker's exec: the stage sends its seccomp listener
	// (if any) and then execs; success closes its channel, failure reports.
	if err := l.awaitExec(run); err != nil {
		return err
	}
	started := &protocol.Started{
		DomainID: r.DomainID, Generation: r.Generation, InitPID: run.initPID, UIDBase: base, Limits: limits,
		Seccomp: "unfiltered", FloorSHA256: floor.ProgramSHA256, Notify: run.listener >= 0,
		RootfsDigest: digest, Restored: r.Checkpoint, OneShot: r.OneShot,
	}
	if profile != nil {
		started.Seccomp, started.SeccompSHA = "filtered", r.Seccomp.SHA256
	}
	l.out.send(&protocol.LauncherResponse{Type: protocol.TypeStarted, Started: started})
	return nil
}

// startInit clones the init from a goroutine whose OS thread stays locked
// and alive until the init is reaped: the parent-death signal fires when the
// creating thread exits, not the process.
func (l *launcher) startInit(run *domainRun, base uint32, ctl, execCh *os.File) error {
	size := int(l.cfg.UIDPool.Size)
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{initArg0},
		Env:        []string{},
		ExtraFiles: []*os.File{ctl, execCh},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
				unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: size}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: size}},
			// setgroups stays allowed (the map is written by root) so the
			// init can drop root's supplementary groups, which would
			// otherwise follow it into the domain as host gid 0.
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			UseCgroupFD:                true,
			CgroupFD:                   run.cgfd,
		},
	}
	if out := workerOutput(); out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	started := make(chan error, 1)
	run.done = make(chan waitResult, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread is the init's parent
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		var res waitResult
		for {
			_, err := unix.Wait4(cmd.Process.Pid, &res.status, 0, &res.rusage)
			if err != unix.EINTR {
				break
			}
		}
		run.done <- res
	}()
	if err := <-started; err != nil {
		return protocol.Errorf(protocol.CodeNamespaceFailed, "clone init: %w", err)
	}
	run.initPID = cmd.Process.Pid
	return nil
}

// workerOutput is where the worker's stdout and stderr go: the launcher's
// stderr when it is a pipe to the kernel, never a terminal (a worker holding
// a terminal descriptor could inject input with TIOCSTI).
func workerOutput() *os.File {
	if _, err := unix.IoctlGetTermios(2, unix.TCGETS); err == nil {
		return nil
	}
	return os.Stderr
}

func (l *launcher) prepareMounts(initPID int, base uint32, rootfs, lower, domdir, sock int) ([]int, error) {
	var fds []int
	fail := func(err error) ([]int, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, protocol.Errorf(protocol.CodeMountFailed, "%w", err)
	}
	domainNS, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", initPID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(domainNS)
	ownerNS, err := l.workspaceUserns(base)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(ownerNS)

	ro := uint64(unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	rootMnt, err := idmappedClone(rootfs, domainNS, ro, true)
	if err != nil {
		return fail(err)
	}
	fds = append(fds, rootMnt)
	lowerMnt, err := idmappedClone(lower, ownerNS, ro, false)
	if err != nil {
		return fail(err)
	}
	fds = append(fds, lowerMnt)
	// Overlay clones its layers' mounts, which it may only do for mounts in
	// the mounter's namespace: the upper and work dirs travel as a detached
	// bind of the domain directory, attached by the init.
	layers, err := unix.OpenTree(domdir, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fail(err)
	}
	fds = append(fds, layers)
	if sock >= 0 {
		sockMnt, err := idmappedClone(sock, ownerNS, uint64(unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC), false)
		if err != nil {
			return fail(err)
		}
		fds = append(fds, sockMnt)
	}
	return fds, nil
}

// idmappedClone makes a detached bind mount of fd with the given attributes
// and the id mapping of userns.
func idmappedClone(fd, userns int, attrs uint64, recursive bool) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	mnt, err := unix.OpenTree(fd, "", flags)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	setFlags := uint(unix.AT_EMPTY_PATH)
	if recursive {
		setFlags |= unix.AT_RECURSIVE
	}
	attr := &unix.MountAttr{Attr_set: attrs | unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(mnt, "", setFlags, attr); err != nil {
		unix.Close(mnt)
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return mnt, nil
}

// workspaceUserns returns a user namespace mapping exactly the kernel's
// workspace owner to this domain's worker, to idmap the workspace with. No
// other host id is mapped, so nothing else in the clone becomes the
// worker's. The namespace's only process is traced: it stops at its exec,
// before running a single instruction, and is killed once the namespace is
// open (the descriptor keeps the namespace alive).
func (l *launcher) workspaceUserns(base uint32) (int, error) {
	cmd := &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{holdArg0}, Env: []string{},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: int(l.cfg.WorkspaceOwnerUID), HostID: int(base + l.cfg.WorkerUID), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: int(l.cfg.WorkspaceOwnerGID), HostID: int(base + l.cfg.WorkerGID), Size: 1}},
			Ptrace:      true,
			Pdeathsig:   unix.SIGKILL,
		},
	}
	runtime.LockOSThread() // the tracer is this thread
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return fd, err
}

// runHold is what a traced namespace holder would run if it were ever let
// go: nothing.
func runHold() {}

func (l *launcher) awaitExec(run *domainRun) error {
	deadline := time.Now().Add(actionDeadline)
	// init first: it reports whether the mounts and the stage came up.
	msg, _, err := recvMsg(run.ctl, deadline)
	if err != nil {
		return protocol.Errorf(protocol.CodeNamespaceFailed, "init: %w", err)
	}
	if msg.Error != "" {
		return protocol.E(protocol.Code(msg.Error))
	}
	for {
		msg, fds, err := recvMsg(run.execCh, deadline)
		if errors.Is(err, io.EOF) {
			return nil // channel closed on exec: the worker runs
		}
		if err != nil {
			return protocol.Errorf(protocol.CodeExecFailed, "stage: %w", err)
		}
		if msg.Error != "" {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return protocol.E(protocol.Code(msg.Error))
		}
		if msg.Listener && len(fds) == 1 && run.listener < 0 {
			run.listener = fds[0]
			continue
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		return protocol.Errorf(protocol.CodeExecFailed, "unexpected stage message")
	}
}
