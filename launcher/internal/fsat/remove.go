package fsat

import (
	"errors"

	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

// SameFile reports whether fd is the file st was taken from.
func SameFile(fd int, st *unix.Stat_t) bool {
	var now unix.Stat_t
	return unix.Fstat(fd, &now) == nil && now.Dev == st.Dev && now.Ino == st.Ino
}

func CloseAll(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// RemoveAll deletes name under dirfd recursively without following any
// symlink: the tree holds whatever a hostile worker wrote into its upper
// layer, including symlinks to host paths and chains of directories deeper
// than any descriptor limit. So it holds at most two descriptors whatever
// the depth: it descends by name beneath the directory it holds and climbs
// back through "..", proving each climb lands on the directory it came from
// (dev and inode), and keeps only the names still to visit per level.
func RemoveAll(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	type level struct {
		name  string   // this directory's name in its parent
		left  []string // entries still to remove
		where unix.Stat_t
	}
	fd := -1
	defer func() { CloseAll(fd) }()
	var stack []level
	enter := func(parent int, n string) error {
		child, err := OpenBeneath(parent, n, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		// Overlay's work dir leaves mode-000 directories; root reads them
		// anyway, and the chmod keeps this correct without CAP_DAC_OVERRIDE.
		_ = unix.Fchmod(child, 0o700)
		lv := level{name: n}
		if err = unix.Fstat(child, &lv.where); err == nil {
			lv.left, err = Names(child)
		}
		if err != nil {
			unix.Close(child)
			return err
		}
		CloseAll(fd)
		fd, stack = child, append(stack, lv)
		return nil
	}
	if err := enter(dirfd, name); err != nil {
		return ignoreENOENT(err)
	}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if len(top.left) == 0 {
			done := top.name
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				break
			}
			up, err := unix.Openat(fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			unix.Close(fd)
			fd = up
			if p := &stack[len(stack)-1].where; !SameFile(fd, p) {
				return protocol.Errorf(protocol.CodePathUnsafe, "tree moved during removal")
			}
			if err := unix.Unlinkat(fd, done, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
			continue
		}
		n := top.left[len(top.left)-1]
		top.left = top.left[:len(top.left)-1]
		err := unix.Unlinkat(fd, n, 0)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
		case errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM):
			if err := enter(fd, n); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
		default:
			return err
		}
	}
	CloseAll(fd)
	fd = -1
	return ignoreENOENT(unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR))
}

func ignoreENOENT(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
