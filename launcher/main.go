package main

import (
	"cmp"
	"os"
	"sync"
	"time"

	"github.com/autonomic-kernel/autonomic/launcher/internal/archiver"
	"github.com/autonomic-kernel/autonomic/launcher/internal/domainroot"
	"github.com/autonomic-kernel/autonomic/launcher/internal/notifier"
	"github.com/autonomic-kernel/autonomic/launcher/internal/settings"
	"github.com/autonomic-kernel/autonomic/launcher/internal/wire"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

func main() {
	switch os.Args[0] {
	case wire.InitArg0:
		os.Exit(domainroot.RunInit())
	case wire.StageArg0:
		os.Exit(domainroot.RunStage())
	case wire.HoldArg0:
		os.Exit(0) // traced: stopped at its exec, then killed
	case wire.CkptArg0:
		os.Exit(archiver.Run())
	case wire.NotifyArg0:
		os.Exit(notifier.Run())
	}
	os.Exit(serve())
}

// frameWriter serialises frames from the monitor's goroutines onto stdout.
type frameWriter struct {
	mu      sync.Mutex
	out     *os.File
	id      string
	version int // the request's; before one is admitted, the newest
}

func (w *frameWriter) send(r *protocol.LauncherResponse) {
	r.Protocol, r.RequestID = cmp.Or(w.version, protocol.LauncherVersion), w.id
	b, err := protocol.Encode(r)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = protocol.WriteFrame(w.out, b, protocol.LauncherResponseMax)
}

func (w *frameWriter) fail(err error) int {
	w.send(&protocol.LauncherResponse{Type: protocol.TypeError, Error: protocol.AsWire(err)})
	return 1
}

// handlers is the whole launcher: one row per action. Admission has already
// checked the request's exact field set against protocol's table, which
// names the same actions (TestOneActionTable).
func handlers() map[string]func(*launcher) error {
	return map[string]func(*launcher) error{
		protocol.ActionPreflight:  (*launcher).preflight,
		protocol.ActionCreate:     (*launcher).create,
		protocol.ActionFreeze:     (*launcher).freeze,
		protocol.ActionThaw:       (*launcher).thaw,
		protocol.ActionCheckpoint: (*launcher).checkpoint,
		protocol.ActionDestroy:    (*launcher).destroy,
		protocol.ActionInspect:    (*launcher).inspect,
		protocol.ActionRelease:    (*launcher).release,
		protocol.ActionImport:     (*launcher).importArchive,
	}
}

type launcher struct {
	cfg      *settings.Config
	req      *protocol.LauncherRequest
	out      *frameWriter
	stdin    *os.File
	deadline time.Time
	state    stateDirs
}

func serve() int {
	// Whatever the caller left open beyond stdio is the caller's: no
	// process this launcher starts (the init, PID 1 of a domain, above
	// all) may inherit it. Go's exec closes only close-on-exec ones.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	out := &frameWriter{out: os.Stdout}
	if len(os.Args) != 1 {
		return out.fail(protocol.Errorf(protocol.CodeInvalidField, "the launcher takes no arguments"))
	}
	if os.Geteuid() != 0 {
		return out.fail(protocol.E(protocol.CodeNotPrivileged))
	}
	ownRlimits()
	// A non-blocking stdin lets the Go poller enforce read deadlines. The
	// flag is on the caller's open file, so it is put back on the way out.
	if fl, err := unix.FcntlInt(0, unix.F_GETFL, 0); err == nil {
		defer unix.FcntlInt(0, unix.F_SETFL, fl)
	}
	_ = unix.SetNonblock(0, true)
	stdin := os.NewFile(0, "stdin")
	b, err := protocol.ReadFrame(stdin, protocol.LauncherRequestMax, time.Now().Add(wire.RequestDeadline))
	if err != nil {
		return out.fail(err)
	}
	req, err := protocol.DecodeLauncherRequest(b)
	if err != nil {
		return out.fail(err)
	}
	out.id, out.version = req.RequestID, req.Protocol
	cfg, err := loadConfig()
	if err != nil {
		return out.fail(err)
	}
	l := &launcher{cfg: cfg, req: req, out: out, stdin: stdin, deadline: time.Now().Add(wire.ActionDeadline)}
	if l.state, err = openState(cfg); err != nil {
		return out.fail(err)
	}
	if err := handlers()[req.Action](l); err != nil {
		return out.fail(err)
	}
	return 0
}

// ownRlimits replaces the limits sudo passes on from the caller with the
// launcher's own before it writes anything: a low RLIMIT_FSIZE cut state
// records short, a low RLIMIT_CPU would kill a monitor (and so its domain)
// mid-life. The descriptor limit is kept: every path already fails closed
// under a low one. Where root may not raise a hard limit, the soft limit
// rises to it and every state write is still checked whole.
func ownRlimits() {
	inf := uint64(unix.RLIM_INFINITY)
	for _, r := range []struct {
		res      int
		cur, max uint64
	}{
		{unix.RLIMIT_FSIZE, inf, inf}, {unix.RLIMIT_CPU, inf, inf}, {unix.RLIMIT_DATA, inf, inf},
		{unix.RLIMIT_AS, inf, inf}, {unix.RLIMIT_RSS, inf, inf}, {unix.RLIMIT_LOCKS, inf, inf},
		{unix.RLIMIT_CORE, 0, 0},
	} {
		if unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.cur, Max: r.max}) != nil {
			var old unix.Rlimit
			if unix.Getrlimit(r.res, &old) == nil {
				_ = unix.Setrlimit(r.res, &unix.Rlimit{Cur: min(r.cur, old.Max), Max: old.Max})
			}
		}
	}
}
