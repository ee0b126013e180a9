package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/settings"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// stateDirs are descriptors for the launcher's root-owned state:
// domains/<id>/{meta.json,upper,work}, slots/<n> -> <id>, checkpoints/<sha>.tar,
// holds/<id>/<sha> (the archives a domain id holds, which outlive it).
// checkpoints/ alone is readable by workspace_owner_gid (0750, archives
// 0640): the kernel's account reads a final checkpoint for the harvest and
// re-hashes it; it never writes there.
type stateDirs struct {
	root, domains, slots, checkpoints, holds int
}

func openState(c *settings.Config) (stateDirs, error) {
	var s stateDirs
	var err error
	if s.root, err = fsat.OpenRoot(c.StateRoot); err != nil {
		return s, err
	}
	for _, d := range []struct {
		name      string
		fd        *int
		gid, mode int
	}{{"domains", &s.domains, 0, 0o700}, {"slots", &s.slots, 0, 0o700}, {"checkpoints", &s.checkpoints, int(c.WorkspaceOwnerGID), 0o750}, {"holds", &s.holds, 0, 0o700}} {
		if err := unix.Mkdirat(s.root, d.name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return s, protocol.Errorf(protocol.CodeConfigInvalid, "state dir: %w", err)
		}
		if *d.fd, err = fsat.OpenDir(s.root, d.name); err != nil {
			return s, protocol.Errorf(protocol.CodeConfigInvalid, "state dir: %w", err)
		}
		if err := fsat.CheckRootOwnedFd(*d.fd, true); err != nil {
			return s, err
		}
		if err := errors.Join(unix.Fchown(*d.fd, 0, d.gid), unix.Fchmod(*d.fd, uint32(d.mode))); err != nil {
			return s, protocol.Errorf(protocol.CodeConfigInvalid, "state dir: %w", err)
		}
	}
	return s, nil
}

// domainMeta is written once at create; later actions trust it because it
// lives in a root-owned directory no domain can reach.
type domainMeta struct {
	Generation   int    `json:"generation"`
	Slot         uint32 `json:"slot"`
	UIDBase      uint32 `json:"uid_base"`
	OneShot      bool   `json:"one_shot"`
	RootfsDigest string `json:"rootfs_digest"`
}

func readMeta(domfd int) (*domainMeta, error) {
	b, err := fsat.ReadFile(domfd, "meta.json", 4096)
	if err != nil {
		return nil, err
	}
	var m domainMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// lockDomain takes the domain's exclusive lock, waiting until the deadline.
// create holds it while it builds the domain, so a concurrent destroy waits
// for a consistent domain instead of racing a half-built one.
func lockDomain(domfd int, deadline time.Time) error {
	for {
		err := unix.Flock(domfd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		if time.Now().After(deadline) {
			return protocol.E(protocol.CodeDomainBusy)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// allocSlot claims the first free uid range. symlinkat is atomic and its
// target records the owner, so two launchers can never claim one slot.
func (l *launcher) allocSlot(id string) (uint32, error) {
	for i := uint32(0); i < l.cfg.UIDPool.Count; i++ {
		err := unix.Symlinkat(id, l.state.slots, strconv.FormatUint(uint64(i), 10))
		if err == nil {
			// On disk before any process runs under the range.
			return i, unix.Fsync(l.state.slots)
		}
		if !errors.Is(err, unix.EEXIST) {
			return 0, err
		}
	}
	return 0, protocol.E(protocol.CodeUIDPoolExhausted)
}

// releaseSlotsOf frees every slot id owns. It reads every slot rather than
// trusting meta.json, which a create that died early never wrote; a slot
// it cannot read stops it, so a failure leaks a slot and never frees one
// that is in use.
func (l *launcher) releaseSlotsOf(id string) error {
	buf := make([]byte, 128)
	for i := uint32(0); i < l.cfg.UIDPool.Count; i++ {
		name := strconv.FormatUint(uint64(i), 10)
		n, err := unix.Readlinkat(l.state.slots, name, buf)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return err
		}
		if string(buf[:n]) == id {
			if err := unix.Unlinkat(l.state.slots, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
		}
	}
	return nil
}

func (l *launcher) uidBase(slot uint32) uint32 {
	return l.cfg.UIDPool.Base + slot*l.cfg.UIDPool.Size
}
