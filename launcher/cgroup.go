package main

import (
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/launcher/internal/cgstat"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/settings"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// openCgroupParent opens the configured parent and proves it is cgroup v2:
// on a hybrid host the v1 hierarchies sit next to it and must never be
// touched.
// A missing parent is made only inside a directory proven to be on cgroup
// v2: a mkdir in a v1 hierarchy would already have made a v1 cgroup.
func (l *launcher) openCgroupParent() (int, error) {
	fd, err := fsat.OpenAbsolute(l.cfg.CgroupParent)
	if errors.Is(err, unix.ENOENT) {
		dir, base := path.Split(l.cfg.CgroupParent)
		var up int
		if up, err = fsat.OpenAbsolute(dir); err != nil {
			return -1, protocol.Errorf(protocol.CodeConfigInvalid, "cgroup_parent: %w", err)
		}
		defer unix.Close(up)
		if !onCgroup2(up) {
			return -1, protocol.Errorf(protocol.CodeConfigInvalid, "cgroup_parent is not on cgroup v2")
		}
		if err := unix.Mkdirat(up, base, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, protocol.Errorf(protocol.CodeCgroupFailed, "cgroup parent: %w", err)
		}
		fd, err = fsat.OpenDir(up, base)
	}
	if err != nil {
		return -1, protocol.Errorf(protocol.CodeConfigInvalid, "cgroup_parent: %w", err)
	}
	if !onCgroup2(fd) {
		unix.Close(fd)
		return -1, protocol.Errorf(protocol.CodeConfigInvalid, "cgroup_parent is not on cgroup v2")
	}
	return fd, nil
}

func onCgroup2(fd int) bool {
	var sfs unix.Statfs_t
	return unix.Fstatfs(fd, &sfs) == nil && sfs.Type == unix.CGROUP2_SUPER_MAGIC
}

// cgroupRecord, in the domain's root-owned directory, names the cgroup this
// launcher made for the domain by its inode, which on cgroup v2 is the
// cgroup's 64-bit id and never reused while the host runs.
const cgroupRecord = "cgroup"

// makeCgroup creates the domain's cgroup and records it. A cgroup of that
// name that already exists was not made for this domain (its directory
// did not exist a moment ago), so it is refused, never adopted.
func makeCgroup(parent, domfd int, id string) (int, error) {
	if err := unix.Mkdirat(parent, id, 0o755); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return -1, protocol.E(protocol.CodeCgroupForeign)
		}
		return -1, protocol.Errorf(protocol.CodeCgroupFailed, "mkdir cgroup: %w", err)
	}
	cg, err := fsat.OpenDir(parent, id)
	var st unix.Stat_t
	if err == nil {
		if err = unix.Fstat(cg, &st); err == nil {
			err = fsat.WriteFile(domfd, cgroupRecord, []byte(strconv.FormatUint(st.Ino, 10)), 0o600)
		}
	}
	if err != nil {
		// Unrecorded, it would never be removed: take it back now, while
		// it is certainly empty and ours.
		fsat.CloseAll(cg)
		_ = unix.Unlinkat(parent, id, unix.AT_REMOVEDIR)
		return -1, protocol.Errorf(protocol.CodeCgroupFailed, "record cgroup: %w", err)
	}
	return cg, nil
}

// ownCgroup opens the cgroup the domain's record names, or returns -1 when
// the domain has none: no record (nothing was made), or no cgroup of that
// name, or one with another id (someone else's, never to be frozen, killed
// or removed by us).
func ownCgroup(parent, domfd int, id string) (int, error) {
	rec, err := fsat.ReadFile(domfd, cgroupRecord, 32)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil
	}
	if err != nil {
		return -1, protocol.Errorf(protocol.CodeLauncherFailed, "cgroup record: %w", err)
	}
	want, err := strconv.ParseUint(string(rec), 10, 64)
	if err != nil {
		return -1, protocol.Errorf(protocol.CodeLauncherFailed, "cgroup record: %w", err)
	}
	cg, err := fsat.OpenDir(parent, id)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil
	}
	if err != nil {
		return -1, protocol.Errorf(protocol.CodeCgroupFailed, "open cgroup: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(cg, &st); err != nil {
		unix.Close(cg)
		return -1, protocol.Errorf(protocol.CodeCgroupFailed, "stat cgroup: %w", err)
	}
	if st.Ino != want {
		// Not the cgroup we made. Empty, it is left alone as someone
		// else's; populated, it may be ours under a damaged record, and
		// going on would free the uid range of a live domain: fail closed.
		state, err := cgstat.ReadState(cg)
		unix.Close(cg)
		if err != nil || state.Populated {
			return -1, protocol.Errorf(protocol.CodeCgroupForeign, "populated cgroup does not match the record")
		}
		return -1, nil
	}
	return cg, nil
}

func cgWrite(fd int, name, value string) error {
	f, err := fsat.OpenBeneath(fd, name, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(f)
	return fsat.WriteAll(f, []byte(value))
}

// cgLimits is the one table of the limits a cgroup v2 controller enforces:
// create writes them (applyLimits), preflight reports which it could.
var cgLimits = []struct {
	name, controller, file string
	value                  func(settings.Limits) uint64
}{
	{"pids", "pids", "pids.max", func(l settings.Limits) uint64 { return l.Pids }},
	{"memory_bytes", "memory", "memory.max", func(l settings.Limits) uint64 { return l.MemoryBytes }},
	{"cpu_millis", "cpu", "cpu.max", func(l settings.Limits) uint64 { return l.CPUMillis }},
}

// applyLimits enables what the parent offers and writes each limit into
// cg, reporting honestly which ones this host enforces. With cg < 0 it
// changes nothing and reports what this host could enforce (preflight).
func applyLimits(parent, cg int, lim settings.Limits) []protocol.Limit {
	avail, _ := cgstat.Read(parent, "cgroup.controllers")
	var out []protocol.Limit
	for _, w := range cgLimits {
		r := protocol.Limit{Name: w.name, Value: w.value(lim)}
		value := strconv.FormatUint(r.Value, 10)
		if w.controller == "cpu" { // cpu_millis of CPU time per second
			value = "max 100000"
			if r.Value > 0 {
				value = strconv.FormatUint(r.Value*100, 10) + " 100000"
			}
		}
		switch {
		case !slices.Contains(strings.Fields(avail), w.controller):
			r.Reason = "cgroup v2 controller " + w.controller + " is not available here (hybrid or undelegated host)"
		case cg < 0:
			r.Enforced = true
		case cgWrite(parent, "cgroup.subtree_control", "+"+w.controller) != nil:
			r.Reason = "could not enable controller " + w.controller
		case cgWrite(cg, w.file, value) != nil:
			r.Reason = "could not write " + w.file
		default:
			r.Enforced = true
		}
		out = append(out, r)
	}
	// RLIMIT_NPROC counts per host uid, and every domain has its own uid
	// range, so it bounds this domain alone on any host.
	return append(out, protocol.Limit{Name: "nproc", Value: lim.NProc, Enforced: true, Reason: "RLIMIT_NPROC"},
		protocol.Limit{Name: "nofile", Value: lim.NoFile, Enforced: true, Reason: "RLIMIT_NOFILE"})
}

// killCgroup kills every process of the domain and proves the cgroup empty.
// cgroup.kill reaches processes that forked, double-forked or left their
// session; nothing in the domain can escape it by reparenting.
func killCgroup(cg int, deadline time.Time) error {
	if err := cgWrite(cg, "cgroup.kill", "1"); err != nil {
		return protocol.Errorf(protocol.CodeCgroupFailed, "cgroup.kill: %w", err)
	}
	if err := cgstat.Wait(cg, deadline, func(s cgstat.State) bool { return !s.Populated }); err != nil {
		return protocol.Errorf(protocol.CodeKillTimeout, "%w", err)
	}
	return nil
}
