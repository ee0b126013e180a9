package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/autonomic-kernel/autonomic/launcher/internal/cgstat"

	"github.com/autonomic-kernel/autonomic/launcher/internal/archiver"
	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/wire"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// checkpoint freezes the domain, archives its upper layer into the
// checkpoint store under its SHA-256, and thaws it again (unless it was
// already frozen).
func (l *launcher) checkpoint() error {
	domfd, cg, err := l.openDomain()
	if err != nil {
		return err
	}
	defer fsat.CloseAll(domfd, cg)
	if err := lockDomain(domfd, l.deadline); err != nil {
		return err
	}
	m, err := readMeta(domfd)
	if err != nil {
		return protocol.Errorf(protocol.CodeDomainNotFound, "meta: %w", err)
	}
	// Only a frozen domain is archived: if its state cannot be read, or the
	// freeze not proven, nothing is. Without a cgroup the domain has no
	// process that could change its upper layer.
	if cg >= 0 {
		st, err := cgstat.ReadState(cg)
		if err != nil {
			return protocol.Errorf(protocol.CodeCgroupFailed, "cgroup state: %w", err)
		}
		if !st.Frozen {
			if err := freezeCg(cg, true, l.deadline); err != nil {
				return err
			}
			defer freezeCg(cg, false, l.deadline)
		}
	}
	upper, err := fsat.OpenDir(domfd, "upper")
	if err != nil {
		return protocol.Errorf(protocol.CodeDomainNotFound, "upper: %w", err)
	}
	defer unix.Close(upper)
	res, err := l.archive(upper, m.UIDBase, l.req.DomainID)
	if err != nil {
		return err
	}
	res.DomainID = l.req.DomainID
	l.out.send(&protocol.LauncherResponse{Type: protocol.TypeCheckpoint, Checkpoint: res})
	return nil
}

// archive writes a deterministic tar of the upper layer: entries sorted by
// name, ownership as in-domain ids, permission bits without set-id bits,
// mtimes in whole seconds, no user or group names. Whiteouts (0/0 character
// devices) and opaque markers are kept, so a restore reproduces deletions.
func (l *launcher) archive(upper int, base uint32, holder string) (*protocol.CheckpointResult, error) {
	return l.store(holder, "", func(f *os.File, room int64) (int, error) {
		spec := archiver.Spec{MaxEntries: l.cfg.MaxCheckpointEntries, MaxBytes: l.cfg.MaxCheckpointBytes, Room: room, MaxData: int64(l.cfg.DiskBytes)}
		// The domain's cgroup is frozen, and a helper born in it would be
		// too: an archive's helper stays in the launcher's.
		return l.runHelper(base, spec, upper, f, -1)
	})
}

// store puts an archive into the checkpoint store, held by holder: fill
// writes it to a temporary file, given the room holder has left, and
// returns its entries; it is published under its digest, which must be
// want when want is set. The store's lock, held until the launcher exits,
// makes its total, the holder's and this archive one decision: two
// archives can never each see room for itself alone.
func (l *launcher) store(holder, want string, fill func(f *os.File, room int64) (int, error)) (*protocol.CheckpointResult, error) {
	if err := lockDomain(l.state.checkpoints, l.deadline); err != nil {
		return nil, err
	}
	used, err := storeBytes(l.state.checkpoints)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "checkpoint store: %w", err)
	}
	held, err := l.heldBytes(holder)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "checkpoint holds: %w", err)
	}
	// One domain cannot take the whole store from every other: what it
	// holds is capped too, until it releases (issue 27, finding 1).
	room := min(l.cfg.MaxCheckpointStoreBytes-used, l.cfg.MaxCheckpointDomainBytes-held)
	if room <= 0 {
		return nil, protocol.E(protocol.CodeCheckpointStoreFull)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	tmp := ".tmp-" + hex.EncodeToString(nonce[:])
	fd, err := unix.Openat(l.state.checkpoints, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "create checkpoint: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer func() {
		f.Close()
		_ = unix.Unlinkat(l.state.checkpoints, tmp, 0)
	}()
	// Root's, readable by the kernel's group (the harvest).
	if err := errors.Join(unix.Fchown(fd, 0, int(l.cfg.WorkspaceOwnerGID)), unix.Fchmod(fd, 0o640)); err != nil {
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "create checkpoint: %w", err)
	}
	entries, err := fill(f, room)
	if err != nil {
		return nil, err
	}
	// Whoever filled it is less trusted than we are: the caps are checked
	// again, and the digest is ours, of the bytes as stored.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size > l.cfg.MaxCheckpointBytes || st.Size > room {
		return nil, protocol.E(protocol.CodeCheckpointTooLarge)
	}
	if err := f.Sync(); err != nil {
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "fsync: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, st.Size)); err != nil {
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "hash checkpoint: %w", err)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	if want != "" && digest != want {
		return nil, protocol.E(protocol.CodeCheckpointCorrupt)
	}
	// The hold first: an archive is never in the store unheld, so a
	// release by another holder of the same digest cannot delete it.
	if err := l.hold(holder, digest); err != nil {
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "hold checkpoint: %w", err)
	}
	if err := unix.Renameat(l.state.checkpoints, tmp, l.state.checkpoints, digest+".tar"); err != nil {
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "publish checkpoint: %w", err)
	}
	_ = unix.Fsync(l.state.checkpoints)
	return &protocol.CheckpointResult{SHA256: digest, Bytes: st.Size, Entries: entries}, nil
}

// runHelper archives the upper layer into f, or restores f into it, in a
// helper that holds no host privilege: this binary again, in a user
// namespace of its own that maps exactly the domain's id range (as the
// domain's own does), and mount, pid, IPC, UTS and cgroup namespaces of its
// own with a network namespace with nothing in it. Its capabilities reach
// only inodes the domain's ids own, so the tar code, which reads and
// writes what a hostile worker made, runs with the domain's reach, never
// root's: an entry that escaped the upper layer would still meet the
// host's permissions as the domain's root. It then confines itself
// (confineHelper) before it reads a byte. It gets both as descriptors and
// answers with the number of entries. cg >= 0 is the cgroup it is born in.
func (l *launcher) runHelper(base uint32, spec archiver.Spec, upper int, f *os.File, cg int) (int, error) {
	spec.IDs = l.cfg.UIDPool.Size
	mon, helper, err := wire.Pair()
	if err != nil {
		return 0, err
	}
	defer mon.Close()
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: int(spec.IDs)}}
	// Descriptors 0-2 closed (its runtime puts /dev/null there) and no
	// pidfd: a checkpoint still works under a low RLIMIT_NOFILE.
	closed := ^uintptr(0)
	pid, err := syscall.ForkExec("/proc/self/exe", []string{wire.CkptArg0}, &syscall.ProcAttr{
		Env: wire.ReexecEnv, Files: []uintptr{closed, closed, closed, helper.Fd()},
		Sys: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNET | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
				unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP,
			UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true, // it drops root's groups
			Credential:  &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			Pdeathsig:   unix.SIGKILL,
			UseCgroupFD: cg >= 0, CgroupFD: cg,
		},
	})
	helper.Close()
	if err != nil {
		return 0, protocol.Errorf(protocol.CodeLauncherFailed, "checkpoint helper: %w", err)
	}
	// Killing a helper that already answered and exited is a no-op; it
	// stays a zombie until reaped here, so the pid cannot be reused first.
	defer unix.Wait4(pid, nil, 0, nil)
	defer unix.Kill(pid, unix.SIGKILL)
	sb, _ := json.Marshal(spec)
	if err := wire.Send(mon, sb, []int{upper, int(f.Fd())}); err != nil {
		return 0, protocol.Errorf(protocol.CodeLauncherFailed, "checkpoint helper: %w", err)
	}
	msg, fds, err := wire.Recv(mon, l.deadline)
	fsat.CloseAll(fds...)
	switch {
	case err != nil:
		return 0, protocol.Errorf(protocol.CodeLauncherFailed, "checkpoint helper: %w", err)
	case msg.Error != "":
		return 0, protocol.E(protocol.Code(msg.Error))
	}
	return msg.Code, nil
}

// storeBytes is the total size of the checkpoint store, every file in it.
// Called under the store's lock, so a temporary archive is one a crashed
// checkpoint left: it is removed rather than counted.
func storeBytes(dir int) (int64, error) {
	names, err := fsat.Names(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, n := range names {
		if strings.HasPrefix(n, ".tmp-") && unix.Unlinkat(dir, n, 0) == nil {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dir, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
			return 0, err
		}
		total += st.Size
	}
	return total, nil
}

// openCheckpoint opens a stored checkpoint and proves its content matches
// its name before anything is extracted from it.
func (l *launcher) openCheckpoint(digest string) (*os.File, error) {
	fd, err := fsat.OpenBeneath(l.state.checkpoints, digest+".tar", unix.O_RDONLY)
	if errors.Is(err, unix.ENOENT) {
		return nil, protocol.E(protocol.CodeCheckpointNotFound)
	}
	if err != nil {
		return nil, fsat.Classify(err)
	}
	f := os.NewFile(uintptr(fd), digest)
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, l.cfg.MaxCheckpointBytes+1))
	if err != nil || n > l.cfg.MaxCheckpointBytes || hex.EncodeToString(h.Sum(nil)) != digest {
		f.Close()
		return nil, protocol.E(protocol.CodeCheckpointCorrupt)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "seek: %w", err)
	}
	return f, nil
}

// heldBytes is the size of the archives holder holds, under the store lock.
func (l *launcher) heldBytes(holder string) (int64, error) {
	dir, err := fsat.OpenDir(l.state.holds, holder)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(dir)
	names, err := fsat.Names(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(l.state.checkpoints, n+".tar", &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			total += st.Size
		} else if !errors.Is(err, unix.ENOENT) {
			return 0, err
		}
	}
	return total, nil
}

// hold records that holder holds the archive digest: holds/<holder>/<digest>.
func (l *launcher) hold(holder, digest string) error {
	if err := unix.Mkdirat(l.state.holds, holder, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	dir, err := fsat.OpenDir(l.state.holds, holder)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	if err := fsat.WriteFile(dir, digest, nil, 0o600); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return unix.Fsync(l.state.holds)
}

// release drops the domain's hold on an archive and deletes the archive
// once no domain holds it. The kernel calls it when an episode has ended
// in the store; a suspended episode keeps its holds for whoever resumes it.
func (l *launcher) release() error {
	holder, digest := l.req.DomainID, l.req.Checkpoint
	if err := lockDomain(l.state.checkpoints, l.deadline); err != nil {
		return err
	}
	res := &protocol.CheckpointResult{DomainID: holder, SHA256: digest, Released: true}
	dir, err := fsat.OpenDir(l.state.holds, holder)
	switch {
	case err == nil:
		err = unix.Unlinkat(dir, digest, 0)
		unix.Close(dir)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return protocol.Errorf(protocol.CodeLauncherFailed, "release: %w", err)
		}
		_ = unix.Unlinkat(l.state.holds, holder, unix.AT_REMOVEDIR) // only if empty
	case !errors.Is(err, unix.ENOENT):
		return protocol.Errorf(protocol.CodeLauncherFailed, "release: %w", err)
	}
	held, err := l.heldByAnyone(digest)
	if err != nil {
		return protocol.Errorf(protocol.CodeLauncherFailed, "release: %w", err)
	}
	if !held {
		err := unix.Unlinkat(l.state.checkpoints, digest+".tar", 0)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return protocol.Errorf(protocol.CodeLauncherFailed, "release: %w", err)
		}
		res.Deleted = err == nil
		_ = unix.Fsync(l.state.checkpoints)
	}
	_ = unix.Fsync(l.state.holds)
	l.out.send(&protocol.LauncherResponse{Type: protocol.TypeCheckpoint, Checkpoint: res})
	return nil
}

// heldByAnyone reports whether any domain holds digest. A holder it cannot
// read counts as holding it: an archive is kept rather than lost.
func (l *launcher) heldByAnyone(digest string) (bool, error) {
	holders, err := fsat.Names(l.state.holds)
	if err != nil {
		return true, err
	}
	for _, h := range holders {
		dir, err := fsat.OpenDir(l.state.holds, h)
		if err != nil {
			return true, err
		}
		var st unix.Stat_t
		err = unix.Fstatat(dir, digest, &st, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(dir)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return true, err
		}
	}
	return false, nil
}
