package main

import (
	"syscall"
	"time"

	"github.com/autonomic-kernel/autonomic/launcher/internal/cgstat"

	"github.com/autonomic-kernel/autonomic/launcher/internal/violations"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/wire"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// monitor watches a started domain until its init exits: violations as
// they happen, the kernel's disappearance (stdin EOF) kills the domain, and
// one exited frame ends it.
func (l *launcher) monitor(run *domainRun) error {
	_ = unix.Flock(run.domfd, unix.LOCK_UN)
	// The notifier's channel ends when the notifier does: with the
	// domain's PID namespace, or earlier if something killed it, and then
	// nothing would report the domain's refused calls: the domain goes.
	relayed := make(chan struct{})
	if run.notify != nil {
		go func() {
			defer close(relayed)
			violations.Relay(run.notify, func(v *protocol.Violation) {
				l.out.send(&protocol.LauncherResponse{Type: protocol.TypeViolation, Violation: v})
			})
		}()
	}
	kernelGone := make(chan struct{})
	go func() {
		_ = l.stdin.SetReadDeadline(time.Time{})
		var b [1]byte
		_, _ = l.stdin.Read(b[:]) // the kernel sends nothing after the request
		close(kernelGone)
	}()
	killedBy := ""
	var res waitResult
	select {
	case res = <-run.done:
	case <-kernelGone:
		killedBy = "kernel_gone"
		_ = killCgroup(run.cgfd, time.Now().Add(wire.ActionDeadline))
		res = <-run.done
	case <-relayed:
		// The init's end ends the notifier too, a moment before the
		// monitor reaps it: only a notifier gone while the init lives is
		// one something killed.
		select {
		case res = <-run.done:
		case <-time.After(time.Second):
			killedBy = "notifier_gone"
			_ = killCgroup(run.cgfd, time.Now().Add(wire.ActionDeadline))
			res = <-run.done
		}
	}
	// The init is reaped: whatever it sent is queued on its channel, which
	// then ends, so its exit report needs no reader while the domain runs.
	var exit wire.Reply
	for {
		m, fds, err := wire.Recv(run.ctl, time.Now().Add(wire.ActionDeadline))
		fsat.CloseAll(fds...)
		if err != nil {
			break
		}
		if m.Exited {
			exit = m
			break
		}
	}
	if run.notify != nil {
		<-relayed
	}
	// The init's own rusage would report the monitor's memory (the init is
	// forked from it); the worker's comes from the init's wait4 instead.
	ex := &protocol.Exited{MaxRSSBytes: uint64(max(exit.MaxRSS, 0)) * 1024, Killed: killedBy}
	switch {
	case exit.Exited && exit.Signal != 0:
		ex.Signal = unix.SignalName(syscall.Signal(exit.Signal))
	case exit.Exited:
		code := exit.Code
		ex.ExitCode = &code
	default:
		// The init died without reporting: something outside the monitor
		// killed the domain (a destroy, the OOM killer, an operator).
		ex.Signal = "SIGKILL"
		if killedBy == "" {
			ex.Killed = "external"
		}
	}
	ex.CPUUserUs, ex.CPUSystemUs = cgstat.CPUUsage(run.cgfd)
	if ex.CPUUserUs == 0 && ex.CPUSystemUs == 0 {
		ex.CPUUserUs = uint64(res.rusage.Utime.Nano() / 1000)
		ex.CPUSystemUs = uint64(res.rusage.Stime.Nano() / 1000)
	}
	ex.PeakMemory = cgstat.MemoryPeak(run.cgfd)
	if run.meta.OneShot {
		// Bound to the directory this create made: if a destroy and a new
		// create of the same id came first, that domain is not ours.
		var st unix.Stat_t
		existed, err := false, unix.Fstat(run.domfd, &st)
		if err == nil {
			existed, err = l.destroyDomain(l.req.DomainID, time.Now().Add(wire.ActionDeadline), &st)
		}
		ex.Destroyed = existed && err == nil
	}
	l.out.send(&protocol.LauncherResponse{Type: protocol.TypeExited, Exited: ex})
	return nil
}
