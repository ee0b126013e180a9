package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/autonomic-kernel/autonomic/launcher/internal/cgstat"

	"github.com/autonomic-kernel/autonomic/launcher/internal/hostprobe"
	"github.com/autonomic-kernel/autonomic/launcher/internal/settings"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/launcher/internal/floor"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// preflight reports what this host enforces, without changing anything
// beyond creating the configured cgroup parent.
func (l *launcher) preflight() error {
	rep := &protocol.PreflightReport{Arch: runtime.GOARCH, FloorSHA256: floor.ProgramSHA256, RootfsExpected: l.cfg.RootfsManifestSHA256}
	problem := func(p string) { rep.Problems = append(rep.Problems, p) }
	if parent, err := l.openCgroupParent(); err == nil {
		rep.CgroupV2, rep.CgroupParent = true, l.cfg.CgroupParent
		avail, _ := cgstat.Read(parent, "cgroup.controllers")
		rep.CgroupControllers = strings.Fields(avail)
		var st unix.Stat_t
		rep.CgroupFreeze = unix.Fstatat(parent, "cgroup.freeze", &st, 0) == nil
		rep.CgroupKill = unix.Fstatat(parent, "cgroup.kill", &st, 0) == nil
		rep.Limits = applyLimits(parent, -1, settings.Limits{})
		unix.Close(parent)
	}
	hostprobe.Features(rep)
	if fd, digest, err := l.openRootfs(""); err == nil {
		unix.Close(fd)
		rep.RootfsDigest = digest
		rep.RootfsMatches = digest == l.cfg.RootfsManifestSHA256
	}
	if f, err := os.Open("/proc/self/exe"); err == nil {
		h := sha256.New()
		_, _ = io.Copy(h, f)
		f.Close()
		rep.LauncherSHA256 = hex.EncodeToString(h.Sum(nil))
	}
	rep.Verdict = "ok"
	for _, lim := range rep.Limits {
		if !lim.Enforced {
			rep.Verdict = "degraded"
		}
	}
	for _, f := range rep.Features {
		if f.Required && !f.OK {
			rep.Verdict = "refused"
		}
	}
	// Every rootfs is opened as a create opens it, so each is verified
	// against its manifest here (in full once per boot) rather than in the
	// first domain that names it. One whose directory is gone (a cleared
	// cache) or that differs fails every create naming it: say so, and
	// what fixes it, before one does.
	for _, name := range slices.Sorted(maps.Keys(l.cfg.Rootfses)) {
		fd, digest, err := l.openRootfs(name)
		if err == nil {
			unix.Close(fd)
			if digest == l.cfg.Rootfses[name].ManifestSHA256 {
				rep.Rootfses = append(rep.Rootfses, name)
				continue
			}
			err = protocol.Errorf(protocol.CodeRootfsMismatch, "manifest digest %s, configured %s", digest, l.cfg.Rootfses[name].ManifestSHA256)
		}
		what := "rootfs " + strconv.Quote(name)
		if name == "" {
			what = "the default rootfs"
		}
		switch {
		case errors.Is(err, protocol.E(protocol.CodeRootfsMissing)):
			problem(what + " is missing at its configured path: re-run the install (make install) to rebuild it")
		case name != "": // the default's mismatch is the refusal below
			problem(what + " differs from its manifest: " + err.Error())
		default:
			continue
		}
		if rep.Verdict == "ok" {
			rep.Verdict = "degraded"
		}
	}
	// The one refusal that is not a host feature.
	if !rep.RootfsMatches {
		problem("rootfs manifest digest differs from the configured one, or the tree from its manifest")
		rep.Verdict = "refused"
	}
	l.out.send(&protocol.LauncherResponse{Type: protocol.TypePreflight, Preflight: rep})
	return nil
}
