package domain

import (
	"bytes"
	"sync"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// maxOutput bounds the worker output a Running keeps; the rest is counted
// and dropped, so a chatty worker cannot grow the kernel.
const maxOutput = 1 << 20

// Running is a started domain. Events delivers violations as they happen
// and ends with exactly one Exited event, then closes.
type Running struct {
	Started *protocol.Started
	events  chan Event
	done    chan struct{}
	exited  *protocol.Exited
	err     error
	close   func() error
	out     *boundedBuffer
	monitor int // pid of the launcher process (or sudo) that monitors the domain
	cgroup  string

	mu         sync.Mutex
	violations []protocol.Violation
}

// maxKeptViolations bounds the violations a Running remembers for callers
// that did not read Events; the launcher already coalesces floods.
const maxKeptViolations = 4096

// deliver records ev and offers it to Events without ever blocking the
// monitor: evidence is kept in Violations even when nobody listens.
func (r *Running) deliver(ev Event) {
	if ev.Violation != nil {
		r.mu.Lock()
		if len(r.violations) < maxKeptViolations {
			r.violations = append(r.violations, *ev.Violation)
		}
		r.mu.Unlock()
	}
	select {
	case r.events <- ev:
	default:
	}
}

// Violations returns every violation reported so far.
func (r *Running) Violations() []protocol.Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]protocol.Violation(nil), r.violations...)
}

// Events is the monitor's stream. It is buffered; a consumer that stops
// reading delays only its own domain's monitor.
func (r *Running) Events() <-chan Event { return r.events }

// Wait blocks until the worker has exited and returns the exited report.
func (r *Running) Wait() (*protocol.Exited, error) {
	<-r.done
	return r.exited, r.err
}

// MonitorPID is the pid of the process the kernel started for this domain:
// the launcher itself when run directly, sudo otherwise.
func (r *Running) MonitorPID() int { return r.monitor }

// Cgroup is the cgroup v2 path (as /proc/<pid>/cgroup names it) the
// worker of an unisolated backend runs in, shared with the kernel; empty
// for an isolated one, whose cgroup is <cgroup_parent>/<domain id>.
func (r *Running) Cgroup() string { return r.cgroup }

// Output is the worker's captured stdout and stderr (bounded).
func (r *Running) Output() []byte { return r.out.Bytes() }

// Close kills the domain by ending the monitor's standard input, then waits.
func (r *Running) Close() error {
	err := r.close()
	<-r.done
	return err
}

type boundedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	dropped int64
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := maxOutput - b.buf.Len()
	if room < len(p) {
		if room > 0 {
			b.buf.Write(p[:room])
		}
		b.dropped += int64(len(p) - max(room, 0))
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
