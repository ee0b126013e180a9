package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/autonomic-kernel/autonomic/launcher/internal/archiver"
	"github.com/autonomic-kernel/autonomic/launcher/internal/confine"
	"github.com/autonomic-kernel/autonomic/launcher/internal/domainroot"
	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/settings"
	"github.com/autonomic-kernel/autonomic/launcher/internal/wire"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/launcher/internal/floor"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// create builds a domain (build) and then stays as its monitor. A build
// that fails after claiming the id destroys what it made.
func (l *launcher) create() error {
	run := &domainRun{domfd: -1, cgfd: -1, listener: -1}
	claimed, err := l.build(run)
	if err != nil {
		// Clean up only the directory this create made, not one a destroy
		// and a new create of the id may have put there meanwhile.
		var st unix.Stat_t
		bound := &st
		if run.domfd < 0 || unix.Fstat(run.domfd, &st) != nil {
			bound = nil
		}
		run.release() // drops the domain lock, so destroy can take it
		if claimed {
			_, _ = l.destroyDomain(l.req.DomainID, time.Now().Add(wire.ActionDeadline), bound)
		}
		return err
	}
	return l.monitor(run)
}

// domainRun is a started domain as the monitor sees it.
type domainRun struct {
	domfd, cgfd int
	ctl, execCh *os.File
	notify      *os.File // the notifier's channel: the listener goes out, violations come in
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
	fsat.CloseAll(run.domfd, run.cgfd, run.listener)
	for _, f := range []*os.File{run.ctl, run.execCh, run.notify} {
		if f != nil {
			f.Close()
		}
	}
}

// build is the create path, in the order of privilege: resolve every host
// object first (failures there leave nothing behind), then claim the id,
// then the cgroup, the clone, the mounts, and the hand-over to the
// unprivileged worker. Everything it opens for the build is closed when it
// returns; run holds what the monitor keeps.
func (l *launcher) build(run *domainRun) (claimed bool, err error) {
	r := l.req
	lim, err := l.cfg.EffectiveLimits(r.Limits)
	if err != nil {
		return false, err
	}
	env, err := l.cfg.WorkerEnv(r.Env, domainroot.WorkerHome)
	if err != nil {
		return false, err
	}
	var profile []byte
	if r.Seccomp != nil {
		if profile, err = r.Seccomp.Decode(); err != nil {
			return false, err
		}
	}
	if err := checkStderr(); err != nil {
		return false, err
	}
	notify := profile != nil && confine.HostSeccompActions()["user_notif"]
	if profile != nil && !notify && confine.ProgramUsesNotify(profile) {
		return false, protocol.Errorf(protocol.CodeSeccompUnsupported, "host lacks user notification")
	}

	// 1. Resolve: rootfs (by manifest digest), workspace, socket, checkpoint.
	rootfs, digest, err := l.openRootfs(r.Rootfs)
	if err != nil {
		return false, err
	}
	defer unix.Close(rootfs)
	if digest != l.cfg.Rootfses[r.Rootfs].ManifestSHA256 {
		return false, protocol.E(protocol.CodeRootfsMismatch)
	}
	lower, err := l.openWorkspace(r.WorkspaceID)
	if err != nil {
		return false, err
	}
	defer unix.Close(lower)
	var socks []domainSocket
	for _, ds := range r.DomainSockets() {
		if ds.ID == "" {
			continue
		}
		s := domainSocket{id: ds.ID, name: ds.Name}
		if s.fd, err = l.openSocket(s.id); err != nil {
			return false, err
		}
		defer unix.Close(s.fd)
		socks = append(socks, s)
	}
	var ckpt *os.File
	if r.Checkpoint != "" {
		if ckpt, err = l.openCheckpoint(r.Checkpoint); err != nil {
			return false, err
		}
		defer ckpt.Close()
	}

	// 2. Claim: the domain directory is the lock on the id; from here on
	// every failure destroys whatever exists, which destroy tolerates.
	// 0711: the domain's root (an unmapped host uid) must traverse it to
	// reach upper/ and work/; domains/ itself stays 0700.
	if err := unix.Mkdirat(l.state.domains, r.DomainID, 0o711); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return false, protocol.E(protocol.CodeDomainExists)
		}
		return false, protocol.Errorf(protocol.CodeLauncherFailed, "mkdir domain: %w", err)
	}
	claimed = true

	domfd, err := fsat.OpenDir(l.state.domains, r.DomainID)
	if errors.Is(err, unix.ENOENT) {
		// A destroy removed it between our mkdir and this open.
		return true, protocol.Errorf(protocol.CodeDomainNotFound, "destroyed while being created")
	}
	if err != nil {
		return true, err
	}
	run.domfd = domfd
	if err := lockDomain(domfd, l.deadline); err != nil {
		return true, err
	}
	// A destroy may have removed the directory between our mkdir and our
	// lock; building inside an unlinked directory would leak the domain.
	var st unix.Stat_t
	if err := unix.Fstat(domfd, &st); err != nil || st.Nlink == 0 {
		return true, protocol.Errorf(protocol.CodeDomainNotFound, "destroyed while being created")
	}
	slot, err := l.allocSlot(r.DomainID)
	if err != nil {
		return true, err
	}
	base := l.uidBase(slot)
	run.meta = domainMeta{Generation: r.Generation, Slot: slot, UIDBase: base, OneShot: r.OneShot, RootfsDigest: digest}
	mb, _ := json.Marshal(run.meta)
	if err := fsat.WriteFile(domfd, "meta.json", mb, 0o600); err != nil {
		return true, protocol.Errorf(protocol.CodeLauncherFailed, "meta: %w", err)
	}

	disk, err := mountLayers(domfd, l.cfg.DiskBytes, base+l.cfg.WorkerUID, base+l.cfg.WorkerGID, base)
	if err != nil {
		return true, protocol.Errorf(protocol.CodeMountFailed, "layers: %w", err)
	}
	upper, err := fsat.OpenDir(domfd, "upper")
	if err != nil {
		return true, err
	}
	defer unix.Close(upper)

	// 3. cgroup: the init is born inside it (CLONE_INTO_CGROUP), so no
	// process of the domain ever exists outside it, not even briefly; a
	// restore's helper runs in it before, so the restored pages are the
	// domain's, not the kernel's.
	parent, err := l.openCgroupParent()
	if err != nil {
		return true, err
	}
	defer unix.Close(parent)
	if run.cgfd, err = makeCgroup(parent, domfd, r.DomainID); err != nil {
		return true, err
	}
	limits := append(applyLimits(parent, run.cgfd, lim), disk, protocol.Limit{Name: "tmp_bytes", Value: l.cfg.TmpBytes, Enforced: true})
	if ckpt != nil {
		restore := archiver.Spec{Restore: true, MaxEntries: l.cfg.MaxCheckpointEntries, MaxBytes: l.cfg.MaxCheckpointBytes}
		if _, err := l.runHelper(base, restore, upper, ckpt, run.cgfd); err != nil {
			return true, err
		}
	}

	// 4. Clone the init into new user, mount, pid, net, ipc, uts and cgroup
	// namespaces. Its uid 0 is the first id of this domain's private range.
	ctlMon, ctlInit, err := wire.Pair()
	if err != nil {
		return true, err
	}
	execMon, execInit, err := wire.Pair()
	if err != nil {
		return true, err
	}
	run.ctl, run.execCh = ctlMon, execMon
	var notifyInit *os.File
	if notify {
		// The init starts the notifier as it starts (init.go); the
		// listener follows once the stage has made it.
		if run.notify, notifyInit, err = wire.Pair(); err != nil {
			return true, err
		}
	}
	if err := l.startInit(run, base, ctlInit, execInit, notifyInit); err != nil {
		return true, err
	}
	ctlInit.Close()
	execInit.Close()
	if notifyInit != nil {
		notifyInit.Close()
	}
	if err := setRlimits(run.initPID, lim); err != nil {
		return true, protocol.Errorf(protocol.CodeNamespaceFailed, "prlimit: %w", err)
	}

	// 5. Mounts, prepared here as private detached trees and attached by
	// the init inside its own namespace: the rootfs read-only, the
	// workspace idmapped so the kernel's clone shows as the worker's own
	// files (copy-up works).
	fds, err := l.prepareMounts(base, rootfs, lower, domfd, socks)
	if err != nil {
		return true, err
	}
	spec := wire.Spec{
		Argv: r.Argv, Env: env, Cwd: r.Cwd, UID: l.cfg.WorkerUID, GID: l.cfg.WorkerGID, IDs: l.cfg.UIDPool.Size, TmpBytes: l.cfg.TmpBytes,
		Floor: floor.Program(), Profile: profile, Notify: notify,
	}
	for _, s := range socks {
		spec.Sockets = append(spec.Sockets, s.name)
	}
	if spec.Cwd == "" {
		spec.Cwd = "/workspace"
	}
	sb, _ := json.Marshal(spec)
	err = wire.Send(run.ctl, sb, fds)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		return true, protocol.Errorf(protocol.CodeNamespaceFailed, "send spec: %w", err)
	}

	// 6. Wait for the worker's exec: the stage sends its seccomp listener
	// (if any) and then execs; success closes its channel, failure reports.
	if err := l.awaitExec(run); err != nil {
		return true, err
	}
	if run.listener >= 0 {
		// The monitor keeps no copy: if the notifier dies, notified calls
		// fail (ENOSYS) rather than wait for an answer that never comes.
		err := wire.SendReply(run.notify, wire.Reply{Listener: true}, []int{run.listener})
		unix.Close(run.listener)
		run.listener = -1
		if err != nil {
			// A worker that exits at once can take its domain, and the
			// notifier with it, down before the listener arrives: then it
			// ran, and nothing is left to answer.
			select {
			case res := <-run.done:
				run.done <- res
			case <-time.After(time.Second):
				return true, protocol.Errorf(protocol.CodeSeccompFailed, "hand the listener to the notifier: %w", err)
			}
		}
	}
	started := &protocol.Started{
		DomainID: r.DomainID, Generation: r.Generation, InitPID: run.initPID, UIDBase: base, Limits: limits,
		Seccomp: "unfiltered", FloorSHA256: floor.ProgramSHA256, Notify: run.notify != nil,
		RootfsDigest: digest, Restored: r.Checkpoint, OneShot: r.OneShot,
	}
	if profile != nil {
		started.Seccomp, started.SeccompSHA = "filtered", r.Seccomp.SHA256
	}
	l.out.send(&protocol.LauncherResponse{Type: protocol.TypeStarted, Started: started})
	return true, nil
}

// startInit clones the init from a goroutine whose OS thread stays locked
// and alive until the init is reaped: the parent-death signal fires when the
// creating thread exits, not the process.
func (l *launcher) startInit(run *domainRun, base uint32, ctl, execCh, notify *os.File) error {
	size := int(l.cfg.UIDPool.Size)
	files := []*os.File{ctl, execCh}
	if notify != nil {
		files = append(files, notify) // fdNotifier
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{wire.InitArg0},
		Env:        wire.ReexecEnv,
		ExtraFiles: files,
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
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr // checkStderr vouched for it
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

// mountLayers makes the upper and work dirs of the overlay: upper the
// worker's (the merged root of /workspace), work the domain root's (it
// mounts the overlay). They live on a tmpfs of the domain's own, of
// disk_bytes, so a worker filling /workspace gets ENOSPC and no host disk
// fills; its pages are charged to the memory cgroup of whoever writes them.
// Overlay wants both under one mount: the tmpfs is attached at layers/
// (which the init's overlay uses) and its upper bound at upper/ (which
// checkpoint and restore use); destroy detaches both (unmountLayers).
// Overlay in a user namespace keeps whiteouts in user.* xattrs, which tmpfs
// has only since Linux 6.6: before, the dirs stay on the state disk and
// the started frame says disk_bytes is not enforced.
func mountLayers(domfd int, size uint64, wuid, wgid, base uint32) (protocol.Limit, error) {
	lim := protocol.Limit{Name: "disk_bytes", Value: size}
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return lim, err
	}
	defer unix.Close(fs)
	// 0711 as the domain dir: the domain's root reaches work/ through it.
	for k, v := range map[string]string{"size": strconv.FormatUint(size, 10), "mode": "0711"} {
		if err := unix.FsconfigSetString(fs, k, v); err != nil {
			return lim, err
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return lim, err
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return lim, err
	}
	defer unix.Close(mnt)
	at := domfd
	if unix.Setxattr(fmt.Sprintf("/proc/self/fd/%d", mnt), "user.autonomic", nil, 0) == nil {
		at, lim.Enforced = mnt, true
	} else {
		lim.Reason = "tmpfs here has no user xattrs (Linux < 6.6): the upper layer is on the state disk, unbounded"
	}
	for _, d := range []struct {
		name     string
		mode     uint32
		uid, gid uint32
	}{{"upper", 0o755, wuid, wgid}, {"work", 0o700, base, base}} {
		if err := unix.Mkdirat(at, d.name, d.mode); err != nil {
			return lim, err
		}
		if err := unix.Fchownat(at, d.name, int(d.uid), int(d.gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return lim, err
		}
	}
	if !lim.Enforced {
		return lim, nil
	}
	for _, name := range []string{"layers", "upper"} {
		if err := unix.Mkdirat(domfd, name, 0o700); err != nil {
			return lim, err
		}
	}
	if err := unix.MoveMount(mnt, "", domfd, "layers", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return lim, err
	}
	b, err := unix.OpenTree(domfd, "layers/upper", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return lim, err
	}
	defer unix.Close(b)
	return lim, unix.MoveMount(b, "", domfd, "upper", unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// unmountLayers detaches what mountLayers attached, whichever of it exists.
func unmountLayers(domfd int) {
	for _, name := range []string{"upper", "layers"} {
		_ = unix.Unmount(fmt.Sprintf("/proc/self/fd/%d/%s", domfd, name), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	}
}

// checkStderr accepts the launcher's stderr as the worker's stdout and
// stderr only when it is a pipe or /dev/null: the worker holds whatever it
// is, and a directory would hand it the host's tree, a file or a socket the
// caller's object, a terminal input injection (TIOCSTI).
func checkStderr() error {
	var st, null unix.Stat_t
	if err := unix.Fstat(2, &st); err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFIFO:
			return nil
		case unix.S_IFCHR:
			if unix.Stat("/dev/null", &null) == nil && null.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == null.Rdev {
				return nil
			}
		}
	}
	return protocol.Errorf(protocol.CodePathUnsafe, "stderr is not a pipe or /dev/null")
}

// setRlimits sets every resource limit of the domain on its init, before
// it starts anything: nothing is inherited from whoever ran the launcher,
// and only the launcher (root on the host) could raise a hard limit the
// caller had lowered. Memory, CPU time and processes are the cgroup's to
// bound; these close the rest (protocol/README.md §5.2 lists them).
func setRlimits(pid int, lim settings.Limits) error {
	inf := uint64(unix.RLIM_INFINITY)
	for _, r := range []struct {
		res      int
		cur, max uint64
	}{
		{unix.RLIMIT_CPU, inf, inf}, {unix.RLIMIT_FSIZE, inf, inf}, {unix.RLIMIT_DATA, inf, inf},
		{unix.RLIMIT_STACK, 8 << 20, inf}, {unix.RLIMIT_CORE, 0, 0}, {unix.RLIMIT_RSS, inf, inf},
		{unix.RLIMIT_NPROC, lim.NProc, lim.NProc}, {unix.RLIMIT_NOFILE, lim.NoFile, lim.NoFile},
		{unix.RLIMIT_MEMLOCK, 8 << 20, 8 << 20}, {unix.RLIMIT_AS, inf, inf}, {unix.RLIMIT_LOCKS, lim.NoFile, lim.NoFile},
		{unix.RLIMIT_SIGPENDING, 4096, 4096}, {unix.RLIMIT_MSGQUEUE, 819200, 819200},
		{unix.RLIMIT_NICE, 0, 0}, {unix.RLIMIT_RTPRIO, 0, 0}, {unix.RLIMIT_RTTIME, 0, 0},
	} {
		want := unix.Rlimit{Cur: r.cur, Max: r.max}
		err := unix.Prlimit(pid, r.res, &want, nil)
		var old unix.Rlimit
		if err == unix.EPERM && unix.Prlimit(pid, r.res, nil, &old) == nil {
			// Raising a hard limit needs CAP_SYS_RESOURCE, which some
			// hosts deny even root; a caller's lower limit is stricter.
			want.Max = min(want.Max, old.Max)
			want.Cur = min(want.Cur, want.Max)
			err = unix.Prlimit(pid, r.res, &want, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (l *launcher) prepareMounts(base uint32, rootfs, lower, domdir int, socks []domainSocket) ([]int, error) {
	var fds []int
	fail := func(err error) ([]int, error) {
		fsat.CloseAll(fds...)
		return nil, protocol.Errorf(protocol.CodeMountFailed, "%w", err)
	}
	nobody := uint32(65534)
	// The workspace's owner becomes the worker (copy-up works); nothing
	// else in the clone is mapped, so nothing else becomes the worker's.
	ownerNS, err := l.idmapUserns(l.cfg.WorkspaceOwnerUID, base+l.cfg.WorkerUID, l.cfg.WorkspaceOwnerGID, base+l.cfg.WorkerGID)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(ownerNS)
	ro := uint64(unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	// The rootfs is not idmapped: its host-root files stay unmapped (the
	// overflow id) in the domain, so no domain identity owns them.
	type clone struct {
		fd, userns int
		attrs      uint64
		recursive  bool
	}
	steps := []clone{{rootfs, -1, ro, true}, {lower, ownerNS, ro, false},
		// Overlay clones its layers' mounts, which it may only do for
		// mounts in the mounter's namespace: the upper and work dirs
		// travel as a detached bind of the domain directory (recursive:
		// with its layers tmpfs).
		{domdir, -1, 0, true}}
	if len(socks) > 0 {
		// Read-only, owned by the domain's nobody, its group the
		// worker's: the worker connects (mode 0660) but cannot chmod,
		// chown or replace it.
		sockNS, err := l.idmapUserns(l.cfg.WorkspaceOwnerUID, base+nobody, l.cfg.WorkspaceOwnerGID, base+l.cfg.WorkerGID)
		if err != nil {
			return fail(err)
		}
		defer unix.Close(sockNS)
		for _, s := range socks {
			steps = append(steps, clone{s.fd, sockNS, ro | unix.MOUNT_ATTR_NOEXEC, false})
		}
	}
	for _, s := range steps {
		mnt, err := cloneMount(s.fd, s.userns, s.attrs, s.recursive)
		if err != nil {
			return fail(err)
		}
		fds = append(fds, mnt)
	}
	return fds, nil
}

// cloneMount makes a detached bind mount of fd with the given attributes
// and, when userns >= 0, its id mapping. Every clone is made private: a
// clone of a shared mount joins its peer group, and every mount the domain
// then makes on it would propagate back into the host (and pivot_root
// refuses a shared parent).
func cloneMount(fd, userns int, attrs uint64, recursive bool) (int, error) {
	flags, setFlags := uint(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH), uint(unix.AT_EMPTY_PATH)
	if recursive {
		flags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	mnt, err := unix.OpenTree(fd, "", flags)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: attrs, Propagation: unix.MS_PRIVATE}
	if userns >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(userns)
	}
	if err := unix.MountSetattr(mnt, "", setFlags, attr); err != nil {
		unix.Close(mnt)
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return mnt, nil
}

// idmapUserns returns a user namespace mapping exactly one host uid and one
// host gid, to idmap a mount with. The namespace's only process is traced:
// it stops at its exec, before running a single instruction, and is killed
// once the namespace is open (the descriptor keeps the namespace alive).
func (l *launcher) idmapUserns(uid, toUID, gid, toGID uint32) (int, error) {
	cmd := &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{wire.HoldArg0}, Env: []string{},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: int(toUID), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: int(toGID), Size: 1}},
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

// awaitExec waits for the init's word that the worker's execve happened
// (or why not), then takes what the stage sent: its listener, or the
// reason it failed, which names the failure more exactly than the init.
func (l *launcher) awaitExec(run *domainRun) error {
	deadline := time.Now().Add(wire.ActionDeadline)
	msg, _, err := wire.Recv(run.ctl, deadline)
	if err != nil {
		return protocol.Errorf(protocol.CodeNamespaceFailed, "init: %w", err)
	}
	stageErr := l.stageMessages(run, deadline)
	if msg.Error != "" {
		if stageErr != nil {
			return stageErr
		}
		return protocol.E(protocol.Code(msg.Error))
	}
	return stageErr
}

// stageMessages reads the exec channel to its end: the init has answered,
// so the stage has exec'd or is gone, and everything it sent is queued.
func (l *launcher) stageMessages(run *domainRun, deadline time.Time) error {
	for {
		msg, fds, err := wire.Recv(run.execCh, deadline)
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
		if msg.Listener && len(fds) == 1 && run.listener < 0 && run.notify != nil {
			run.listener = fds[0]
			continue
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		return protocol.Errorf(protocol.CodeExecFailed, "unexpected stage message")
	}
}
