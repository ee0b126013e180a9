package main

import (
	"archive/tar"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/launcher/internal/floor"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// opaqueXattr marks an overlay directory that hides the lower one. With
// userxattr (an overlay mounted in a user namespace) it lives in "user.".
const opaqueXattr = "user.overlay.opaque"

const paxOpaque = "SCHILY.xattr." + opaqueXattr

// paxAllowed are the PAX records archive/tar writes for our entries.
var paxAllowed = map[string]bool{"path": true, "linkpath": true, "size": true, "uid": true, "gid": true, "mtime": true, paxOpaque: true}

// checkpoint freezes the domain, archives its upper layer into the
// checkpoint store under its SHA-256, and thaws it again (unless it was
// already frozen).
func (l *launcher) checkpoint() error {
	domfd, cg, err := l.openDomain()
	if err != nil {
		return err
	}
	defer closeAll(domfd, cg)
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
		st, err := readCgState(cg)
		if err != nil {
			return protocol.Errorf(protocol.CodeCgroupFailed, "cgroup state: %w", err)
		}
		if !st.frozen {
			if err := freezeCg(cg, true, l.deadline); err != nil {
				return err
			}
			defer freezeCg(cg, false, l.deadline)
		}
	}
	upper, err := openDirBeneath(domfd, "upper")
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
	// The store's lock makes its total, the holder's and this archive one
	// decision: two checkpoints can never each see room for itself alone.
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
	spec := ckptSpec{MaxEntries: l.cfg.MaxCheckpointEntries, MaxBytes: l.cfg.MaxCheckpointBytes, Room: room, MaxData: int64(l.cfg.DiskBytes)}
	// The domain's cgroup is frozen, and a helper born in it would be too:
	// an archive's helper stays in the launcher's.
	entries, err := l.runHelper(base, spec, upper, f, -1)
	if err != nil {
		return nil, err
	}
	// The helper is less trusted than we are: its caps are checked again,
	// and the digest is ours, of the bytes as stored.
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

// ckptSpec is what the launcher tells its checkpoint helper.
type ckptSpec struct {
	Restore    bool   `json:"restore"`
	MaxEntries int    `json:"max_entries"`
	MaxBytes   int64  `json:"max_bytes"`
	Room       int64  `json:"room"` // left in the checkpoint store
	IDs        uint32 `json:"ids"`  // the size of the domain's id range
	// MaxData bounds the file data an archive holds by what the upper
	// layer can hold (disk_bytes): hard links archive their data once
	// per name, and nothing else can make the sum larger.
	MaxData int64 `json:"max_data"`
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
func (l *launcher) runHelper(base uint32, spec ckptSpec, upper int, f *os.File, cg int) (int, error) {
	spec.IDs = l.cfg.UIDPool.Size
	mon, helper, err := seqpacketPair()
	if err != nil {
		return 0, err
	}
	defer mon.Close()
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: int(spec.IDs)}}
	// Descriptors 0-2 closed (its runtime puts /dev/null there) and no
	// pidfd: a checkpoint still works under a low RLIMIT_NOFILE.
	closed := ^uintptr(0)
	pid, err := syscall.ForkExec("/proc/self/exe", []string{ckptArg0}, &syscall.ProcAttr{
		Env: reexecEnv, Files: []uintptr{closed, closed, closed, helper.Fd()},
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
	if err := sendMsg(mon, sb, []int{upper, int(f.Fd())}); err != nil {
		return 0, protocol.Errorf(protocol.CodeLauncherFailed, "checkpoint helper: %w", err)
	}
	msg, fds, err := recvMsg(mon, l.deadline)
	closeAll(fds...)
	switch {
	case err != nil:
		return 0, protocol.Errorf(protocol.CodeLauncherFailed, "checkpoint helper: %w", err)
	case msg.Error != "":
		return 0, protocol.E(protocol.Code(msg.Error))
	}
	return msg.Code, nil
}

// runCheckpointHelper is the helper's side of runHelper.
func runCheckpointHelper() int {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	ch := os.NewFile(3, "ckpt")
	b, fds, err := recvSized(ch, time.Now().Add(actionDeadline), 4096)
	var spec ckptSpec
	if err != nil || len(fds) != 2 || json.Unmarshal(b, &spec) != nil {
		return 1
	}
	if err := confineHelper(spec); err != nil {
		_ = sendReply(ch, initReply{Error: string(protocol.CodeLauncherFailed)}, nil)
		return 1
	}
	f := os.NewFile(uintptr(fds[1]), "archive")
	n := 0
	if spec.Restore {
		n, err = extract(f, fds[0], spec)
	} else {
		cw := &countingWriter{w: f, max: spec.MaxBytes, room: spec.Room}
		a := &archiver{tw: tar.NewWriter(cw), maxEntries: spec.MaxEntries, maxData: spec.MaxData}
		if err = a.walk(fds[0], "", 0); err == nil {
			if err = a.tw.Close(); err != nil {
				err = checkpointWriteError(err)
			}
		}
		n = a.entries
	}
	f.Close()
	if err != nil {
		_ = sendReply(ch, initReply{Error: string(protocol.AsWire(err).Code)}, nil)
		return 1
	}
	_ = sendReply(ch, initReply{Exited: true, Code: n}, nil)
	return 0
}

// helperCaps are the capabilities the helper keeps, in its own user
// namespace only: owners and modes as archived (chown, fowner), and every
// inode of the domain's ids readable and writable whatever its mode (dac).
const helperCaps = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH | 1<<unix.CAP_FOWNER

// confineHelper leaves the helper only what the tar code needs before it
// touches what a worker wrote: no capability but helperCaps in any set
// (bounding included), on every thread; no_new_privs; the seccomp floor
// the worker runs under (no mount, namespace, ptrace, BPF, io_uring, …);
// and limits of its own rather than its caller's: files no larger than an
// archive may be, CPU time bounded, no core dump.
func confineHelper(spec ckptSpec) error {
	if err := keepCaps(helperCaps); err != nil {
		return err
	}
	fsize := uint64(spec.MaxBytes) + 1<<20 // one archive, or one restored file
	for _, r := range []struct {
		res int
		val uint64
	}{{unix.RLIMIT_FSIZE, fsize}, {unix.RLIMIT_CPU, uint64(2 * actionDeadline / time.Second)}, {unix.RLIMIT_CORE, 0}} {
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.val, Max: r.val}); err != nil {
			return err
		}
	}
	_, err := installFilter(floor.Program(), unix.SECCOMP_FILTER_FLAG_TSYNC)
	return err
}

// keepCaps leaves every thread with the capabilities in mask (all below
// 32) and no other, in every set, the bounding set included, and sets
// no_new_privs: nothing it execs or is made to exec gains one back.
func keepCaps(mask uint32) error {
	for c := uintptr(0); c <= 63; c++ {
		if c < 32 && mask&(1<<c) != 0 {
			continue
		}
		if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); err == unix.EINVAL {
			break // past the kernel's last capability
		} else if err != nil {
			return err
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: mask, Permitted: mask}}
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return err
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return err
	}
	return allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
}

type archiver struct {
	tw            *tar.Writer
	entries       int
	maxEntries    int
	data, maxData int64
}

// maxArchiveDepth bounds how deep the archiver descends, and so the
// descriptors it holds (one per level). A deeper upper layer is refused
// with checkpoint_too_large rather than failing on the descriptor limit.
const maxArchiveDepth = 256

func (a *archiver) walk(dir int, prefix string, depth int) error {
	if depth > maxArchiveDepth {
		return protocol.Errorf(protocol.CodeCheckpointTooLarge, "deeper than %d levels", maxArchiveDepth)
	}
	// No more names are read than entries are left: a directory of
	// millions is refused, never listed whole first.
	left := a.maxEntries - a.entries
	names, err := readSomeNames(dir, left+1)
	if err != nil {
		return protocol.Errorf(protocol.CodeLauncherFailed, "read upper: %w", err)
	}
	if len(names) > left {
		return protocol.E(protocol.CodeCheckpointTooLarge)
	}
	slices.Sort(names)
	for _, name := range names {
		if a.entries++; a.entries > a.maxEntries {
			return protocol.E(protocol.CodeCheckpointTooLarge)
		}
		if err := a.entry(dir, name, prefix+name, depth); err != nil {
			return err
		}
	}
	return nil
}

func (a *archiver) entry(dir int, name, full string, depth int) error {
	// A restore opens each entry's parent by its whole path: a longer one
	// would make an archive that can never be restored.
	if len(full) >= unix.PathMax-1 {
		return protocol.Errorf(protocol.CodeCheckpointTooLarge, "path longer than PATH_MAX")
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return protocol.Errorf(protocol.CodeLauncherFailed, "stat: %w", err)
	}
	// Owners as the domain numbers them: the helper's namespace maps the
	// domain's range, and an id outside it (none should exist) reads as
	// the overflow id, nobody.
	hdr := &tar.Header{
		Name: full, Mode: int64(st.Mode & 0o1777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, 0), Format: tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, full+"/"
		sub, err := openDirBeneath(dir, name)
		if err != nil {
			return protocol.Errorf(protocol.CodeLauncherFailed, "open dir: %w", err)
		}
		defer unix.Close(sub)
		buf := make([]byte, 8)
		if n, err := unix.Fgetxattr(sub, opaqueXattr, buf); err == nil && string(buf[:n]) == "y" {
			hdr.PAXRecords = map[string]string{paxOpaque: "y"}
		}
		if err := a.tw.WriteHeader(hdr); err != nil {
			return checkpointWriteError(err)
		}
		return a.walk(sub, full+"/", depth+1)
	case unix.S_IFREG:
		// O_NONBLOCK and the re-check: what we open must still be the
		// regular file we stat'ed, never a fifo swapped in to hang us.
		fd, err := openBeneath(dir, name, unix.O_RDONLY|unix.O_NONBLOCK)
		if err != nil {
			return protocol.Errorf(protocol.CodeLauncherFailed, "open file: %w", err)
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		var again unix.Stat_t
		if unix.Fstat(fd, &again) != nil || again.Mode&unix.S_IFMT != unix.S_IFREG || again.Ino != st.Ino || again.Size != st.Size {
			return protocol.Errorf(protocol.CodeCheckpointUnsafe, "upper layer changed during checkpoint")
		}
		// A sparse file costs the domain its few blocks and the store its
		// whole apparent size, at every checkpoint: 4 KiB on the tmpfs
		// wrote 60 MiB of zeros (issue 27, finding 1). Refused: an archive
		// holds no more than the upper layer does.
		if st.Size > st.Blocks*512 {
			return protocol.Errorf(protocol.CodeCheckpointUnsafe, "sparse file in upper layer")
		}
		if a.data += st.Size; a.maxData > 0 && a.data > a.maxData {
			return protocol.Errorf(protocol.CodeCheckpointTooLarge, "more file data than disk_bytes")
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		if err := a.tw.WriteHeader(hdr); err != nil {
			return checkpointWriteError(err)
		}
		// The domain is frozen, so the size cannot move under us; CopyN
		// still refuses a file that shrank.
		if _, err := io.CopyN(a.tw, f, st.Size); err != nil {
			return checkpointWriteError(err)
		}
		return nil
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return protocol.Errorf(protocol.CodeLauncherFailed, "readlink: %w", err)
		}
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, string(buf[:n]), 0o777
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return protocol.Errorf(protocol.CodeCheckpointUnsafe, "device node in upper layer")
		}
		hdr.Typeflag = tar.TypeChar // an overlay whiteout
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
	default:
		a.entries-- // sockets mean nothing after a restore
		return nil
	}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return checkpointWriteError(err)
	}
	return nil
}

type countingWriter struct {
	w         io.Writer
	n         int64
	max, room int64
}

var (
	errCheckpointTooLarge = errors.New("checkpoint too large")
	errStoreFull          = errors.New("checkpoint store full")
)

func (c *countingWriter) Write(p []byte) (int, error) {
	switch n := c.n + int64(len(p)); {
	case n > c.max:
		return 0, errCheckpointTooLarge
	case n > c.room:
		return 0, errStoreFull
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func checkpointWriteError(err error) error {
	switch {
	case errors.Is(err, errCheckpointTooLarge):
		return protocol.E(protocol.CodeCheckpointTooLarge)
	case errors.Is(err, errStoreFull):
		return protocol.E(protocol.CodeCheckpointStoreFull)
	}
	return protocol.Errorf(protocol.CodeLauncherFailed, "write checkpoint: %w", err)
}

// storeBytes is the total size of the checkpoint store, every file in it.
// Called under the store's lock, so a temporary archive is one a crashed
// checkpoint left: it is removed rather than counted.
func storeBytes(dir int) (int64, error) {
	names, err := readNames(dir)
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
	fd, err := openBeneath(l.state.checkpoints, digest+".tar", unix.O_RDONLY)
	if errors.Is(err, unix.ENOENT) {
		return nil, protocol.E(protocol.CodeCheckpointNotFound)
	}
	if err != nil {
		return nil, classifyOpen(err)
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

// extract restores an archive into an empty upper layer. Each entry's parent
// is opened beneath the upper with no symlink crossing, so neither a "../"
// name nor a symlink planted by an earlier entry can lead outside it. Only
// directories, regular files, symlinks, fifos and whiteouts are accepted.
func extract(f *os.File, upper int, spec ckptSpec) (int, error) {
	unsafeEntry := func(why string) (int, error) {
		return 0, protocol.Errorf(protocol.CodeCheckpointUnsafe, "%s", why)
	}
	tr := tar.NewReader(f)
	type dirTime struct {
		name string
		t    time.Time
	}
	var dirs []dirTime
	entries, data := 0, int64(0)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, protocol.Errorf(protocol.CodeCheckpointCorrupt, "%w", err)
		}
		if entries++; entries > spec.MaxEntries {
			return 0, protocol.E(protocol.CodeCheckpointTooLarge)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") || strings.Contains(name, "/../") {
			return unsafeEntry("entry name")
		}
		// Only the records our archiver writes: anything else (a GNU sparse
		// map that would expand a tiny archive into gigabytes, another
		// xattr) is refused.
		for k := range hdr.PAXRecords {
			if !paxAllowed[k] {
				return unsafeEntry("PAX record")
			}
		}
		if hdr.Typeflag == tar.TypeReg {
			if data += hdr.Size; hdr.Size < 0 || data > spec.MaxBytes {
				return 0, protocol.E(protocol.CodeCheckpointTooLarge)
			}
		}
		if hdr.Uid < 0 || hdr.Gid < 0 || uint64(hdr.Uid) >= uint64(spec.IDs) || uint64(hdr.Gid) >= uint64(spec.IDs) {
			return unsafeEntry("owner outside the domain's range")
		}
		parentName, base1 := path.Split(name)
		parent := upper
		if parentName != "" {
			if parent, err = openDirBeneath(upper, strings.TrimSuffix(parentName, "/")); err != nil {
				return unsafeEntry("parent is not a directory beneath the upper layer")
			}
		}
		err = extractOne(tr, hdr, parent, base1)
		if parent != upper {
			unix.Close(parent)
		}
		if err != nil {
			return 0, err
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTime{name, hdr.ModTime})
		}
	}
	// Directory mtimes last: creating their children moved them.
	for i := len(dirs) - 1; i >= 0; i-- {
		ts := []unix.Timespec{unix.NsecToTimespec(dirs[i].t.UnixNano()), unix.NsecToTimespec(dirs[i].t.UnixNano())}
		_ = unix.UtimesNanoAt(upper, dirs[i].name, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	return entries, nil
}

func extractOne(tr *tar.Reader, hdr *tar.Header, parent int, name string) error {
	mode := uint32(hdr.Mode) & 0o1777 // never set-id, whatever the archive says
	var err error
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = unix.Mkdirat(parent, name, 0o700)
		if err == nil && hdr.PAXRecords[paxOpaque] == "y" {
			var d int
			if d, err = openDirBeneath(parent, name); err == nil {
				err = unix.Fsetxattr(d, opaqueXattr, []byte("y"), 0)
				unix.Close(d)
			}
		}
	case tar.TypeReg:
		var fd int
		fd, err = unix.Openat(parent, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			w := os.NewFile(uintptr(fd), name)
			_, err = io.CopyN(w, tr, hdr.Size)
			w.Close()
		}
	case tar.TypeSymlink:
		err = unix.Symlinkat(hdr.Linkname, parent, name)
	case tar.TypeChar:
		if hdr.Devmajor != 0 || hdr.Devminor != 0 {
			return protocol.Errorf(protocol.CodeCheckpointUnsafe, "device node")
		}
		err = unix.Mknodat(parent, name, unix.S_IFCHR|0o000, 0)
	case tar.TypeFifo:
		err = unix.Mkfifoat(parent, name, 0o600)
	default:
		return protocol.Errorf(protocol.CodeCheckpointUnsafe, "entry type %q", hdr.Typeflag)
	}
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return protocol.Errorf(protocol.CodeCheckpointUnsafe, "duplicate entry")
		}
		return protocol.Errorf(protocol.CodeLauncherFailed, "extract: %w", err)
	}
	if err := unix.Fchownat(parent, name, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return protocol.Errorf(protocol.CodeLauncherFailed, "chown: %w", err)
	}
	if hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeChar {
		if err := unix.Fchmodat(parent, name, mode, 0); err != nil {
			return protocol.Errorf(protocol.CodeLauncherFailed, "chmod: %w", err)
		}
	}
	if hdr.Typeflag != tar.TypeDir {
		t := unix.NsecToTimespec(hdr.ModTime.UnixNano())
		_ = unix.UtimesNanoAt(parent, name, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// heldBytes is the size of the archives holder holds, under the store lock.
func (l *launcher) heldBytes(holder string) (int64, error) {
	dir, err := openDirBeneath(l.state.holds, holder)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(dir)
	names, err := readNames(dir)
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
	dir, err := openDirBeneath(l.state.holds, holder)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	if err := writeFileAt(dir, digest, nil, 0o600); err != nil && !errors.Is(err, unix.EEXIST) {
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
	dir, err := openDirBeneath(l.state.holds, holder)
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
	holders, err := readNames(l.state.holds)
	if err != nil {
		return true, err
	}
	for _, h := range holders {
		dir, err := openDirBeneath(l.state.holds, h)
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
