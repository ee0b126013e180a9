// Package violations turns the notifier's reports of refused calls into
// violation frames, bounded: it runs in the monitor and needs no privilege
// (it reads a channel and the fdinfo of the pidfds it is given).
package violations

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/wire"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// violationBudget is how many violation frames per second go out one by
// one; beyond it, attempts are counted per syscall and flushed once a
// second, so a flood costs the monitor bounded memory and output.
const violationBudget = 64

// Relay, in the monitor, turns the notifier's reports into
// violation frames: violationBudget a second one by one, beyond that
// counted per syscall and flushed once a second. Its work is per refused
// call only; calls that continue never reach it. It returns when the
// notifier's channel ends.
func Relay(ch *os.File, send func(*protocol.Violation)) {
	windowStart, sent := time.Now(), 0
	pending := map[int32]*protocol.Violation{}
	flush := func() {
		for nr, v := range pending {
			send(v)
			delete(pending, nr)
		}
	}
	defer flush()
	for {
		if time.Since(windowStart) >= time.Second {
			flush()
			windowStart, sent = time.Now(), 0
		}
		m, fds, err := wire.Recv(ch, windowStart.Add(time.Second))
		if errors.Is(err, wire.ErrDeadline) {
			continue
		}
		if err != nil {
			return
		}
		v := m.Violation
		if v == nil || len(fds) > 1 {
			fsat.CloseAll(fds...)
			continue
		}
		if len(fds) == 1 {
			v.HostPID = pidOfPidfd(fds[0])
			unix.Close(fds[0])
		}
		if sent < violationBudget {
			sent++
			send(v)
			continue
		}
		if p, ok := pending[v.Nr]; ok {
			p.Count++
			p.MonotonicNs = v.MonotonicNs
		} else {
			pending[v.Nr] = v
		}
	}
}

// pidOfPidfd is the host pid a pidfd refers to (its fdinfo, read in the
// monitor's PID namespace, the host's); 0 once the task is gone.
func pidOfPidfd(fd int) int32 {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Pid:"); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 32); err == nil && n > 0 {
				return int32(n)
			}
		}
	}
	return 0
}
