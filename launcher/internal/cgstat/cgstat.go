// Package cgstat reads cgroup v2 state through descriptors: events,
// processes, CPU and memory figures. It writes nothing and needs no
// privilege (these files are world-readable); what changes a cgroup is the
// monitor's.
package cgstat

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
)

func Read(fd int, name string) (string, error) {
	b, err := fsat.ReadFile(fd, name, 64<<10)
	return string(b), err
}

// Key returns the value of "key value" lines in a flat-keyed cgroup file.
func Key(content, key string) (string, bool) {
	for _, line := range strings.Split(content, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// State is what cgroup.events and cgroup.procs say of a cgroup.
type State struct {
	Populated, Frozen bool
	Procs             int
}

func ReadState(cg int) (State, error) {
	ev, err := Read(cg, "cgroup.events")
	if err != nil {
		return State{}, err
	}
	p, _ := Key(ev, "populated")
	f, _ := Key(ev, "frozen")
	procs, _ := Read(cg, "cgroup.procs")
	return State{Populated: p == "1", Frozen: f == "1", Procs: bytes.Count([]byte(procs), []byte("\n"))}, nil
}

// Wait polls cgroup.events until cond holds or the deadline passes.
func Wait(cg int, deadline time.Time, cond func(State) bool) error {
	delay := 200 * time.Microsecond
	for {
		st, err := ReadState(cg)
		if err != nil {
			return err
		}
		if cond(st) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("deadline")
		}
		time.Sleep(delay)
		if delay < 10*time.Millisecond {
			delay *= 2
		}
	}
}

// CPUUsage reads user and system CPU microseconds from cpu.stat, which
// cgroup v2 keeps even without the cpu controller.
func CPUUsage(cg int) (user, system uint64) {
	s, err := Read(cg, "cpu.stat")
	if err != nil {
		return 0, 0
	}
	u, _ := Key(s, "user_usec")
	y, _ := Key(s, "system_usec")
	user, _ = strconv.ParseUint(u, 10, 64)
	system, _ = strconv.ParseUint(y, 10, 64)
	return user, system
}

func MemoryPeak(cg int) uint64 {
	s, err := Read(cg, "memory.peak")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	return v
}
