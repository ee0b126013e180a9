package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tracer times a create's phases from outside the launcher, without strace
// or perf and without any change to the launcher: inotify reports each
// exec of the launcher binary (the monitor, then its re-executed init and
// stage: IN_OPEN fires for execve), the uid slot's symlink and the domain
// directory in the state root, and the domain's cgroup, as they appear and
// go. A dedicated goroutine stamps each event when read, so a stamp is the
// event plus a wake-up (tens of µs idle, more on a loaded host); the frames'
// stamps come from the driver's reads of stdout. Runs are sequential, so
// every event between two marks belongs to the run between them.
type tracer struct {
	fd    int
	names map[int32]string // watch descriptor → label prefix
	mu    sync.Mutex
	t0    time.Time
	on    bool
	ev    []traceEvent
}

type traceEvent struct {
	label string
	at    time.Duration
}

// newTracer watches the launcher binaries and the directories a create
// touches; a path it cannot watch is left out of the trace.
func newTracer(binaries []string, dirs map[string]string) (*tracer, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	t := &tracer{fd: fd, names: map[int32]string{}}
	for _, b := range binaries {
		if wd, err := unix.InotifyAddWatch(fd, b, unix.IN_OPEN); err == nil {
			t.names[int32(wd)] = "exec"
		}
	}
	for label, d := range dirs {
		if wd, err := unix.InotifyAddWatch(fd, d, unix.IN_CREATE|unix.IN_DELETE); err == nil {
			t.names[int32(wd)] = label
		}
	}
	go t.read()
	return t, nil
}

func (t *tracer) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(t.fd, buf)
		now := time.Now()
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		t.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			e := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(e.Len)
			name, ok := t.names[e.Wd]
			if !ok || !t.on {
				continue
			}
			switch {
			case e.Mask&unix.IN_OPEN != 0:
			case e.Mask&unix.IN_CREATE != 0:
				name += "_created"
			case e.Mask&unix.IN_DELETE != 0:
				name += "_removed"
			default:
				continue
			}
			t.ev = append(t.ev, traceEvent{name, now.Sub(t.t0)})
		}
		t.mu.Unlock()
	}
}

// start begins a run's trace at t0 (the driver's fork/exec).
func (t *tracer) start(t0 time.Time) {
	t.mu.Lock()
	t.t0, t.on, t.ev = t0, true, nil
	t.mu.Unlock()
}

// stop ends the run's trace and returns its phases: the k-th exec of the
// launcher binary is exec1, exec2, …; a directory's events are named by
// their label. It is called after the launcher is reaped, so every event
// is queued; a short pause lets the reader take the last of them.
func (t *tracer) stop() map[string]time.Duration {
	time.Sleep(2 * time.Millisecond)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on = false
	out := map[string]time.Duration{}
	execs := 0
	for _, e := range t.ev {
		label := e.label
		if label == "exec" {
			execs++
			label = fmt.Sprintf("exec%d", execs)
		}
		if _, seen := out[label]; !seen {
			out[label] = e.at
		}
	}
	return out
}

func (t *tracer) close() { unix.Close(t.fd) }

// phaseNames explains the trace's labels in the report.
var phaseNames = map[string]string{
	"exec1":          "the launcher binary is exec'd (after sudo, for the sudo case): the monitor",
	"exec2":          "2nd exec of the launcher binary (today: the domain's init)",
	"exec3":          "3rd exec (today: the idmap user namespace holder, stopped at its exec)",
	"exec4":          "4th exec (today: the worker's stage, which execs the worker)",
	"slot_created":   "uid slot claimed (state/slots symlink)",
	"domain_created": "domain directory made (state/domains)",
	"cgroup_created": "domain cgroup made",
	"started_frame":  "started frame read by the driver",
	"exited_frame":   "exited frame read by the driver",
	"cgroup_removed": "domain cgroup removed",
	"domain_removed": "domain directory removed",
	"slot_removed":   "uid slot freed",
	"reaped":         "launcher process reaped (= wall)",
}

// tracedDirs are the directories a create of the configured launcher
// touches; those that do not exist yet are left out.
func tracedDirs(cfg launcherConfig) map[string]string {
	dirs := map[string]string{}
	for label, d := range map[string]string{
		"slot":   filepath.Join(cfg.StateRoot, "slots"),
		"domain": filepath.Join(cfg.StateRoot, "domains"),
		"cgroup": cfg.CgroupParent,
	} {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dirs[label] = d
		}
	}
	return dirs
}

// phaseMedians is the median of every phase the runs share, in the order
// the phases happen.
func phaseMedians(ss []sample) ([]string, map[string]float64) {
	vals := map[string][]time.Duration{}
	for _, s := range ss {
		for k, v := range s.phases {
			vals[k] = append(vals[k], v)
		}
	}
	med := map[string]float64{}
	var order []string
	for k, v := range vals {
		if 2*len(v) <= len(ss) {
			continue // a phase most runs did not see is noise
		}
		slices.Sort(v)
		med[k] = ms((v[(len(v)-1)/2] + v[len(v)/2]) / 2)
		order = append(order, k)
	}
	slices.SortFunc(order, func(a, b string) int {
		if med[a] != med[b] {
			if med[a] < med[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return order, med
}
