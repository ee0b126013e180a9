package domain_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// The limits tests hold the launcher to its started frame on every host:
// where the host offers a limit's cgroup v2 controller the frame must say
// enforced and a hostile worker must be stopped at the limit; where it does
// not (a hybrid host), the frame must say not enforced with the reason, and
// the same worker must run past the limit, so the report is true either way.
// None of them skips. Each logs one "LIMIT {json}" line of figures, which
// the host matrix (hosts/) collects from its guests.

const mib = 1 << 20

// offered reports whether the bed's cgroup parent offers controller to the
// domains under it (what the launcher reads to decide "enforced"). The
// preflight creates the parent.
func offered(t *testing.T, d *domain.Linux, ctx context.Context, controller string) bool {
	t.Helper()
	if _, err := d.Preflight(ctx); err != nil {
		t.Fatalf("preflight: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(bed.CgroupParent, "cgroup.controllers"))
	if err != nil {
		t.Fatalf("cgroup parent: %v", err)
	}
	return strings.Contains(" "+strings.TrimSpace(string(b))+" ", " "+controller+" ")
}

// limitsDomain starts a long-lived domain (its cgroup outlives the worker,
// so the test can read the controller's counters) running argv.
func limitsDomain(t *testing.T, d *domain.Linux, ctx context.Context, ws string, lim protocol.ResourceLimits, argv ...string) (string, *domain.Running) {
	t.Helper()
	id := newID("lim")
	r, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: argv, Limits: &lim})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		_ = r.Close()
		_, _ = d.Destroy(ctx, id)
	})
	return id, r
}

// waitExited waits for the worker's exited frame, bounded.
func waitExited(t *testing.T, r *domain.Running, within time.Duration) *protocol.Exited {
	t.Helper()
	type res struct {
		ex  *protocol.Exited
		err error
	}
	ch := make(chan res, 1)
	go func() { ex, err := r.Wait(); ch <- res{ex, err} }()
	select {
	case got := <-ch:
		if got.err != nil {
			t.Fatalf("wait: %v\n%s", got.err, r.Output())
		}
		return got.ex
	case <-time.After(within):
		t.Fatalf("worker still running after %s\n%s", within, r.Output())
	}
	return nil
}

func startedLimit(t *testing.T, r *domain.Running, name string) protocol.Limit {
	t.Helper()
	for _, l := range r.Started.Limits {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("started frame has no limit %s: %+v", name, r.Started.Limits)
	return protocol.Limit{}
}

// checkReport holds the started frame to what the host offers.
func checkReport(t *testing.T, l protocol.Limit, want uint64, host bool) {
	t.Helper()
	if l.Value != want {
		t.Errorf("started frame: %s value %d, want %d", l.Name, l.Value, want)
	}
	if l.Enforced != host {
		t.Fatalf("started frame: %s enforced=%v, but the host offers its controller: %v (%s)", l.Name, l.Enforced, host, l.Reason)
	}
	if !l.Enforced && !strings.Contains(l.Reason, "not available") {
		t.Errorf("a limit not enforced must say why: %+v", l)
	}
}

// cgKeyOf reads "key value" from a flat-keyed file of a domain's cgroup.
func cgKeyOf(t *testing.T, id, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(bed.CgroupParent, id, file))
	if err != nil {
		t.Fatalf("domain cgroup: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("%s has no %s: %q", file, key, b)
	return 0
}

func logFigures(t *testing.T, fig map[string]any) {
	b, _ := json.Marshal(fig)
	t.Logf("LIMIT %s", b)
}

var probeKV = regexp.MustCompile(`([a-z_]+)=([A-Za-z0-9]+)`)

// probeOut returns the last value the probe printed for each key.
func probeOut(out []byte) map[string]string {
	m := map[string]string{}
	for _, kv := range probeKV.FindAllStringSubmatch(string(out), -1) {
		m[kv[1]] = kv[2]
	}
	return m
}

// kmsg reads kernel log records written after it was opened.
type kmsg struct{ fd int }

func openKmsg(t *testing.T) *kmsg {
	t.Helper()
	fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("/dev/kmsg: %v", err)
	}
	if _, err := syscall.Seek(fd, 0, 2); err != nil { // SEEK_END: only new records
		t.Fatalf("/dev/kmsg: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	return &kmsg{fd}
}

func (k *kmsg) records() []string {
	var out []string
	buf := make([]byte, 8192)
	for {
		n, err := syscall.Read(k.fd, buf)
		if errors.Is(err, syscall.EPIPE) { // overwritten records: keep reading
			continue
		}
		if err != nil || n <= 0 {
			return out
		}
		if _, msg, ok := strings.Cut(string(buf[:n]), ";"); ok {
			out = append(out, strings.TrimSpace(msg))
		}
	}
}

// TestMemoryLimit: a worker touching twice its memory_bytes is OOM-killed
// inside its own domain at the limit — the kernel log names the domain's
// memory cgroup, the exited frame says SIGKILL, a neighbouring domain and
// the host see no OOM — or, where memory is not enforced, it is not
// stopped and the started frame said so.
func TestMemoryLimit(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	const limit = 64 * mib
	host := offered(t, d, ctx, "memory")
	nb, nr := limitsDomain(t, d, ctx, ws, protocol.ResourceLimits{MemoryBytes: limit}, "/bin/sh", "-c", "echo ready; exec sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(nr.Output()), "ready") })
	var log *kmsg
	if host {
		log = openKmsg(t)
	}
	id, r := limitsDomain(t, d, ctx, ws, protocol.ResourceLimits{MemoryBytes: limit}, testbed.ProbePath, "hog", strconv.Itoa(2*limit/mib))
	checkReport(t, startedLimit(t, r, "memory_bytes"), limit, host)
	ex := waitExited(t, r, 2*time.Minute)
	out := probeOut(r.Output())
	touched, _ := strconv.Atoi(out["hog_mib"])
	fig := map[string]any{"limit": "memory_bytes", "enforced": host, "value": limit, "touched_mib": touched,
		"peak_bytes": ex.PeakMemory, "signal": ex.Signal}
	if !host {
		if touched != 2*limit/mib || out["hog_done"] != strconv.Itoa(touched) || ex.ExitCode == nil || *ex.ExitCode != 0 {
			t.Fatalf("memory reported not enforced, yet the hog was stopped: %+v %s", ex, r.Output())
		}
		logFigures(t, fig)
		return
	}
	if ex.Signal != "SIGKILL" || out["hog_done"] != "" {
		t.Fatalf("hog not killed at its limit: %+v\n%s", ex, r.Output())
	}
	// The peak may pass the limit by a little: once a task is chosen as the
	// OOM victim its charges are forced so that it can exit (64 MiB + 4 KiB
	// measured in guest A).
	if touched*mib > limit || ex.PeakMemory > limit+mib || ex.PeakMemory < limit*3/4 {
		t.Errorf("killed at %d MiB touched, cgroup peak %d bytes; limit %d", touched, ex.PeakMemory, limit)
	}
	ooms := cgKeyOf(t, id, "memory.events", "oom_kill")
	if ooms < 1 {
		t.Errorf("memory.events of the domain counts %d OOM kills", ooms)
	}
	fig["oom_kill"] = ooms
	// The kernel's own record names the domain's cgroup; no other OOM
	// happened meanwhile (the host and the neighbour were not touched).
	rel, err := filepath.Rel(testbed.CgroupV2Mount(), bed.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	memcg := "oom_memcg=/" + rel + "/" + id + ","
	var named bool
	for _, rec := range log.records() {
		if !strings.HasPrefix(rec, "oom-kill:") {
			continue
		}
		if !strings.Contains(rec, memcg) || !strings.Contains(rec, "constraint=CONSTRAINT_MEMCG") {
			t.Errorf("an OOM kill outside the domain: %s", rec)
		}
		named = true
		fig["kernel_log"] = rec
	}
	if !named {
		t.Errorf("no oom-kill record in the kernel log names %s", memcg)
	}
	st, err := d.Inspect(ctx, nb)
	if err != nil || !st.Populated || st.Processes < 1 {
		t.Errorf("the neighbouring domain did not survive: %+v %v", st, err)
	}
	if n := cgKeyOf(t, nb, "memory.events", "oom_kill"); n != 0 {
		t.Errorf("the neighbouring domain saw %d OOM kills", n)
	}
	logFigures(t, fig)
}

// TestPidsLimit: a fork bomb is refused (EAGAIN) once its domain holds
// `pids` tasks, with RLIMIT_NPROC far above so only the pids controller can
// be what stopped it — or, where pids is not enforced, it is not stopped.
func TestPidsLimit(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	const limit, nproc = 32, 1024
	host := offered(t, d, ctx, "pids")
	id, r := limitsDomain(t, d, ctx, ws, protocol.ResourceLimits{Pids: limit, NProc: nproc}, testbed.ProbePath, "forks", strconv.Itoa(2*limit))
	checkReport(t, startedLimit(t, r, "pids"), limit, host)
	ex := waitExited(t, r, 2*time.Minute)
	out := probeOut(r.Output())
	made, err := strconv.Atoi(out["forks"])
	if err != nil {
		t.Fatalf("probe said nothing about forks: %+v\n%s", ex, r.Output())
	}
	fig := map[string]any{"limit": "pids", "enforced": host, "value": limit, "forks": made, "fork_err": out["fork_err"]}
	if !host {
		if made != 2*limit || out["fork_err"] != "none" {
			t.Fatalf("pids reported not enforced, yet forks stopped at %d (%s)", made, out["fork_err"])
		}
		logFigures(t, fig)
		return
	}
	if out["fork_err"] != "EAGAIN" || made >= limit {
		t.Fatalf("fork bomb not stopped by pids=%d: %d forks, error %s", limit, made, out["fork_err"])
	}
	refused := cgKeyOf(t, id, "pids.events", "max")
	if refused < 1 {
		t.Errorf("pids.events counts %d refused forks", refused)
	}
	fig["pids_events_max"] = refused
	logFigures(t, fig)
}

// TestCPULimit: two threads spinning for 2 s of wall time get no more CPU
// than cpu_millis per second (measured by the worker over that window, and
// the cgroup counts throttled periods) — or, where cpu is not enforced,
// clearly more.
func TestCPULimit(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	const millis, window = 100, 2000
	host := offered(t, d, ctx, "cpu")
	id, r := limitsDomain(t, d, ctx, ws, protocol.ResourceLimits{CPUMillis: millis}, testbed.ProbePath, "spin", strconv.Itoa(window))
	checkReport(t, startedLimit(t, r, "cpu_millis"), millis, host)
	ex := waitExited(t, r, 2*time.Minute)
	out := probeOut(r.Output())
	used, err1 := strconv.ParseInt(out["spin_cpu_us"], 10, 64)
	wall, err2 := strconv.ParseInt(out["spin_wall_us"], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("probe said nothing about its spin: %+v\n%s", ex, r.Output())
	}
	budget := wall * millis / 1000 // µs of CPU the limit allows in the window
	fig := map[string]any{"limit": "cpu_millis", "enforced": host, "value": millis, "wall_us": wall, "cpu_us": used,
		"budget_us": budget, "threads": out["spin_threads"]}
	if !host {
		if used <= budget*3/2 {
			t.Fatalf("cpu reported not enforced, yet the spin got only %d µs of CPU in %d µs (budget %d)", used, wall, budget)
		}
		logFigures(t, fig)
		return
	}
	// A quarter and one period's quota of slack: the window need not start
	// on a period, and the worker's clock is not the scheduler's.
	if used > budget*5/4+millis*100 {
		t.Errorf("spin used %d µs of CPU in %d µs of wall time; cpu_millis=%d allows %d", used, wall, millis, budget)
	}
	throttled := cgKeyOf(t, id, "cpu.stat", "nr_throttled")
	if throttled < 1 {
		t.Errorf("cpu.stat counts %d throttled periods", throttled)
	}
	fig["nr_throttled"] = throttled
	logFigures(t, fig)
}
