package archiver

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/launcher/internal/confine"
	"github.com/autonomic-kernel/autonomic/launcher/internal/floor"
	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/wire"
	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

// opaqueXattr marks an overlay directory that hides the lower one. With
// userxattr (an overlay mounted in a user namespace) it lives in "user.".
const opaqueXattr = "user.overlay.opaque"

const paxOpaque = "SCHILY.xattr." + opaqueXattr

// paxAllowed are the PAX records archive/tar writes for our entries.
var paxAllowed = map[string]bool{"path": true, "linkpath": true, "size": true, "uid": true, "gid": true, "mtime": true, paxOpaque: true}

// Spec is what the launcher tells its checkpoint helper.
type Spec struct {
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

// Run is the helper's side of runHelper.
func Run() int {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	ch := os.NewFile(3, "ckpt")
	b, fds, err := wire.RecvSized(ch, time.Now().Add(wire.ActionDeadline), 4096)
	var spec Spec
	if err != nil || len(fds) != 2 || json.Unmarshal(b, &spec) != nil {
		return 1
	}
	if err := confineHelper(spec); err != nil {
		_ = wire.SendReply(ch, wire.Reply{Error: string(protocol.CodeLauncherFailed)}, nil)
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
		_ = wire.SendReply(ch, wire.Reply{Error: string(protocol.AsWire(err).Code)}, nil)
		return 1
	}
	_ = wire.SendReply(ch, wire.Reply{Exited: true, Code: n}, nil)
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
func confineHelper(spec Spec) error {
	if err := confine.KeepCaps(helperCaps); err != nil {
		return err
	}
	fsize := uint64(spec.MaxBytes) + 1<<20 // one archive, or one restored file
	for _, r := range []struct {
		res int
		val uint64
	}{{unix.RLIMIT_FSIZE, fsize}, {unix.RLIMIT_CPU, uint64(2 * wire.ActionDeadline / time.Second)}, {unix.RLIMIT_CORE, 0}} {
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.val, Max: r.val}); err != nil {
			return err
		}
	}
	_, err := confine.InstallFilter(floor.Program(), unix.SECCOMP_FILTER_FLAG_TSYNC)
	return err
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
	names, err := fsat.SomeNames(dir, left+1)
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
		sub, err := fsat.OpenDir(dir, name)
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
		fd, err := fsat.OpenBeneath(dir, name, unix.O_RDONLY|unix.O_NONBLOCK)
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

// extract restores an archive into an empty upper layer. Each entry's parent
// is opened beneath the upper with no symlink crossing, so neither a "../"
// name nor a symlink planted by an earlier entry can lead outside it. Only
// directories, regular files, symlinks, fifos and whiteouts are accepted.
func extract(f *os.File, upper int, spec Spec) (int, error) {
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
			if parent, err = fsat.OpenDir(upper, strings.TrimSuffix(parentName, "/")); err != nil {
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
			if d, err = fsat.OpenDir(parent, name); err == nil {
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
