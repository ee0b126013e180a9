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

// openDomain opens an existing domain's directory and cgroup.
func (l *launcher) openDomain() (domfd, cg int, err error) {
	domfd, err = openDirBeneath(l.state.domains, l.req.DomainID)
	if errors.Is(err, unix.ENOENT) {
		return -1, -1, protocol.E(protocol.CodeDomainNotFound)
	}
	if err != nil {
		return -1, -1, err
	}
	parent, err := l.openCgroupParent()
	if err != nil {
		unix.Close(domfd)
		return -1, -1, err
	}
	defer unix.Close(parent)
	cg, err = openDirBeneath(parent, l.req.DomainID)
	if err != nil {
		cg = -1 // a half-created domain may have no cgroup yet
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
	existed, err := l.destroyDomain(l.req.DomainID, l.deadline)
	if err != nil {
		return err
	}
	return l.answerDomain(&protocol.DomainState{DomainID: l.req.DomainID, Exists: false, Destroyed: existed})
}

// destroyDomain removes whatever exists of a domain, in reverse order of
// creation: kill and prove the cgroup empty, remove it, free the uid range,
// delete the upper and work layers. Every step tolerates its object being
// absent, so a half-created domain and a second destroy both succeed. The
// domain's mounts live only in its own mount namespace, which dies with its
// last process; the host has nothing to unmount.
func (l *launcher) destroyDomain(id string, deadline time.Time) (existed bool, err error) {
	domfd, err := openDirBeneath(l.state.domains, id)
	if errors.Is(err, unix.ENOENT) {
		// create makes the directory first and destroy removes it last, so
		// without it nothing of the domain exists; and touching anything
		// now could tear down a create that starts right after us.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(domfd)
	if err := lockDomain(domfd, deadline); err != nil {
		return true, err
	}
	parent, err := l.openCgroupParent()
	if err != nil {
		return true, err
	}
	defer unix.Close(parent)
	if cg, err := openDirBeneath(parent, id); err == nil {
		err := killCgroup(cg, deadline)
		unix.Close(cg)
		if err != nil {
			return true, err
		}
		if err := unix.Unlinkat(parent, id, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			return true, protocol.Errorf(protocol.CodeCgroupFailed, "rmdir cgroup: %w", err)
		}
	}
	if m, err := readMeta(domfd); err == nil {
		l.releaseSlot(id, m.Slot)
	} else {
		l.releaseSlotsOf(id) // a create that died before meta.json
	}
	unmountLayers(domfd) // issue 11 hook (launcher-mounts): the upper layer's tmpfs
	if err := removeBeneath(l.state.domains, id); err != nil {
		return true, protocol.Errorf(protocol.CodeLauncherFailed, "remove domain: %w", err)
	}
	return true, nil
}

func closeAll(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
