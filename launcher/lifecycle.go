package main

import (
	"errors"
	"time"

	"github.com/autonomic-kernel/autonomic/launcher/internal/cgstat"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"

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
	domfd, err = fsat.OpenDir(l.state.domains, l.req.DomainID)
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
		if s, err := cgstat.ReadState(cg); err == nil {
			st.Populated, st.Frozen, st.Processes = s.Populated, s.Frozen, s.Procs
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
	defer fsat.CloseAll(domfd, cg)
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
	defer fsat.CloseAll(domfd, cg)
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
	if err := cgstat.Wait(cg, deadline, func(s cgstat.State) bool { return s.Frozen == frozen }); err != nil {
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
	domfd, err := fsat.OpenDir(l.state.domains, id)
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
	if err := unix.Fstatat(l.state.domains, id, &named, unix.AT_SYMLINK_NOFOLLOW); err != nil || !fsat.SameFile(domfd, &named) {
		return false, nil
	}
	if bound != nil && !fsat.SameFile(domfd, bound) {
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
	if err := fsat.RemoveAll(l.state.domains, id); err != nil {
		return true, protocol.Errorf(protocol.CodeLauncherFailed, "remove domain: %w", err)
	}
	return true, nil
}
