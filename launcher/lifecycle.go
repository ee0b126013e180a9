package main

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

func (l *launcher) answerDomain(st *protocol.DomainState) error {
	l.out.send(&protocol.LauncherResponse{Type: protocol.TypeDomain, Domain: st})
	return nil
}

// openDomain opens an existing domain's directory and its cgroup, or -1 if
// it has none (a half-created domain). Any other failure is an error: an
// action that went on without the cgroup would act on a domain it cannot see.
func (l *launcher) openDomain() (domfd, cg int, err error) {
	domfd, err = openDirBeneath(l.state.domains, l.req.DomainID)
	if errors.Is(err, unix.ENOENT) {
		return -1, -1, protocol.E(protocol.CodeDomainNotFound)
	}
	if err != nil {
		return -1, -1, protocol.Errorf(protocol.CodeLauncherFailed, "open domain: %w", err)
	}
	parent, err := l.openCgroupParent()
	if err != nil {
		unix.Close(domfd)
		return -1, -1, err
	}
	defer unix.Close(parent)
	if cg, err = ownCgroup(parent, domfd, l.req.DomainID); err != nil {
		unix.Close(domfd)
		return -1, -1, err
	}
	return domfd, cg, nil
}

func (l *launcher) state1(domfd, cg int) *protocol.DomainState {
	st := &protocol.DomainState{DomainID: l.req.DomainID, Exists: true}
	if m, err := readMeta(domfd); err == nil {
		st.Generation, st.UIDBase = m.Generation, m.UIDBase
	}
	if cg >= 0 {
		if s, err := readCgState(cg); err == nil {
			st.Populated, st.Frozen, st.Processes = s.populated, s.frozen, s.procs
		}
	}
	var stt unix.Stat_t
	st.HasUpper = unix.Fstatat(domfd, "upper", &stt, unix.AT_SYMLINK_NOFOLLOW) == nil
	return st
}

func (l *launcher) inspect() error {
	domfd, cg, err := l.openDomain()
	if errors.Is(err, protocol.E(protocol.CodeDomainNotFound)) {
		return l.answerDomain(&protocol.DomainState{DomainID: l.req.DomainID})
	}
	if err != nil {
		return err
	}
	defer closeAll(domfd, cg)
	return l.answerDomain(l.state1(domfd, cg))
}

func (l *launcher) freeze() error { return l.setFrozen(true) }
func (l *launcher) thaw() error   { return l.setFrozen(false) }

// setFrozen writes cgroup.freeze and waits until cgroup.events confirms:
// a freeze is only reported once no task of the domain can run.
func (l *launcher) setFrozen(frozen bool) error {
	domfd, cg, err := l.openDomain()
	if err != nil {
		return err
	}
	defer closeAll(domfd, cg)
	if cg < 0 {
		return protocol.E(protocol.CodeDomainNotRunning)
	}
	if err := lockDomain(domfd, l.deadline); err != nil {
		return err
	}
	if err := freezeCg(cg, frozen, l.deadline); err != nil {
		return err
	}
	return l.answerDomain(l.state1(domfd, cg))
}

func freezeCg(cg int, frozen bool, deadline time.Time) error {
	v := "0"
	if frozen {
		v = "1"
	}
	if err := cgWrite(cg, "cgroup.freeze", v); err != nil {
		return protocol.Errorf(protocol.CodeCgroupFailed, "cgroup.freeze: %w", err)
	}
	if err := waitCg(cg, deadline, func(s cgState) bool { return s.frozen == frozen }); err != nil {
		return protocol.Errorf(protocol.CodeFreezeTimeout, "%w", err)
	}
	return nil
}

func (l *launcher) destroy() error {
	existed, err := l.destroyDomain(l.req.DomainID, l.deadline, nil)
	if err != nil {
		return err
	}
	return l.answerDomain(&protocol.DomainState{DomainID: l.req.DomainID, Exists: false, Destroyed: existed})
}

// destroyDomain removes whatever exists of a domain, in reverse order of
// creation: kill and prove its cgroup empty, remove it, free the uid range,
// delete the upper and work layers. Every step tolerates its object being
// absent, so a half-created domain and a second destroy both succeed; every
// other failure stops at once, leaving the rest for a retry: a uid range
// is freed only once no process of the domain is left, or the next domain
// would share ids with it. The domain's mounts live only in its own mount
// namespace, which dies with its last process.
//
// bound, when set, is the domain directory the caller created: a one-shot
// monitor must not destroy a later domain that reuses the id.
func (l *launcher) destroyDomain(id string, deadline time.Time, bound *unix.Stat_t) (existed bool, err error) {
	domfd, err := openDirBeneath(l.state.domains, id)
	if errors.Is(err, unix.ENOENT) {
		// create makes the directory first and destroy removes it last, so
		// without it nothing of the domain exists; and touching anything
		// now could tear down a create that starts right after us.
		return false, nil
	}
	if err != nil {
		return false, protocol.Errorf(protocol.CodeLauncherFailed, "open domain: %w", err)
	}
	defer unix.Close(domfd)
	if err := lockDomain(domfd, deadline); err != nil {
		return true, err
	}
	// What we locked must still be the domain of that name: a destroy that
	// held the lock before us may have removed it, and a create made a new
	// one, whose slot and directory are not ours to take.
	var named unix.Stat_t
	if err := unix.Fstatat(l.state.domains, id, &named, unix.AT_SYMLINK_NOFOLLOW); err != nil || !sameFile(domfd, &named) {
		return false, nil
	}
	if bound != nil && !sameFile(domfd, bound) {
		return false, nil
	}
	parent, err := l.openCgroupParent()
	if err != nil {
		return true, err
	}
	defer unix.Close(parent)
	cg, err := ownCgroup(parent, domfd, id)
	if err != nil {
		return true, err
	}
	if cg >= 0 {
		err := killCgroup(cg, deadline)
		unix.Close(cg)
		if err != nil {
			return true, err
		}
		if err := unix.Unlinkat(parent, id, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			return true, protocol.Errorf(protocol.CodeCgroupFailed, "rmdir cgroup: %w", err)
		}
	}
	if err := l.releaseSlotsOf(id); err != nil {
		return true, protocol.Errorf(protocol.CodeLauncherFailed, "release uid slot: %w", err)
	}
	unmountLayers(domfd) // issue 11 hook (launcher-mounts): the upper layer's tmpfs
	if err := removeBeneath(l.state.domains, id); err != nil {
		return true, protocol.Errorf(protocol.CodeLauncherFailed, "remove domain: %w", err)
	}
	return true, nil
}

// sameFile reports whether fd is the file st was taken from.
func sameFile(fd int, st *unix.Stat_t) bool {
	var now unix.Stat_t
	return unix.Fstat(fd, &now) == nil && now.Dev == st.Dev && now.Ino == st.Ino
}

func closeAll(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// removeBeneath deletes name under dirfd recursively without following any
// symlink: the tree holds whatever a hostile worker wrote into its upper
// layer, including symlinks to host paths and chains of directories deeper
// than any descriptor limit. So it holds at most two descriptors whatever
// the depth: it descends by name beneath the directory it holds and climbs
// back through "..", proving each climb lands on the directory it came from
// (dev and inode), and keeps only the names still to visit per level.
func removeBeneath(dirfd int, name string) error {
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
	defer func() { closeAll(fd) }()
	var stack []level
	enter := func(parent int, n string) error {
		child, err := openBeneath(parent, n, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		// Overlay's work dir leaves mode-000 directories; root reads them
		// anyway, and the chmod keeps this correct without CAP_DAC_OVERRIDE.
		_ = unix.Fchmod(child, 0o700)
		lv := level{name: n}
		if err = unix.Fstat(child, &lv.where); err == nil {
			lv.left, err = readNames(child)
		}
		if err != nil {
			unix.Close(child)
			return err
		}
		closeAll(fd)
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
			if p := &stack[len(stack)-1].where; !sameFile(fd, p) {
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
	closeAll(fd)
	fd = -1
	return ignoreENOENT(unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR))
}

func ignoreENOENT(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
