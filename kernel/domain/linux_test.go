package domain_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// bed is shared by every test of this package: building the launcher and
// the rootfs once keeps the suite fast.
var bed *testbed.Bed

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		var err error
		if bed, err = testbed.New(context.Background(), testbed.Options{}); err != nil {
			fmt.Fprintln(os.Stderr, "testbed:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if bed != nil {
		if code == 0 {
			_ = bed.Close()
		} else {
			bed.RemoveCgroups()
			fmt.Fprintln(os.Stderr, "testbed kept for inspection:", bed.Dir)
		}
	}
	os.Exit(code)
}

var seq atomic.Int64

// newID returns a domain id unique within this run.
func newID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1))
}

func setup(t *testing.T) (*domain.Linux, context.Context) {
	t.Helper()
	privileged.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return bed.Domains(), ctx
}

func workspace(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	id := newID("ws")
	root, err := bed.Workspace(id, files)
	if err != nil {
		t.Fatal(err)
	}
	return id, root
}

// run creates a one-shot domain running sh -c script and returns its
// output and exit report.
func run(t *testing.T, d *domain.Linux, ctx context.Context, ws, script string) (string, *protocol.Exited) {
	t.Helper()
	r, err := d.Create(ctx, domain.Spec{ID: newID("d"), Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/sh", "-c", script}, OneShot: true})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	ex, err := r.Wait()
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return string(r.Output()), ex
}

// assertNoTrace proves a domain left nothing: no domain directory, no uid
// slot, no cgroup, and no process owned by the bed's uid ranges.
func assertNoTrace(t *testing.T, id string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(bed.State, "domains", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("domain dir of %s still exists (%v)", id, err)
	}
	if _, err := os.Lstat(filepath.Join(bed.CgroupParent, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup of %s still exists (%v)", id, err)
	}
	slots, _ := os.ReadDir(filepath.Join(bed.State, "slots"))
	for _, s := range slots {
		if target, _ := os.Readlink(filepath.Join(bed.State, "slots", s.Name())); target == id {
			t.Errorf("uid slot %s still held by %s", s.Name(), id)
		}
	}
	// Tests run one at a time, so after a destroy no live process may
	// remain in the pool. (A dead init whose monitor was killed can linger
	// as a zombie until the host's init reaps it; zombies run nothing.)
	if pids := processesInPool(); len(pids) > 0 {
		t.Errorf("live processes in the bed's uid pool after destroy: %v", pids)
	}
}

// processesInPool lists live host pids whose real uid lies in the bed's pool.
func processesInPool() []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil || strings.Contains(string(b), "State:\tZ") {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uid, _ := strconv.ParseUint(f[1], 10, 32)
				if uint32(uid) >= bed.UIDBase && uint32(uid) < bed.UIDBase+16*65536 {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

func TestWorkerSeesOnlyItsDomain(t *testing.T) {
	d, ctx := setup(t)
	ws, lower := workspace(t, map[string]string{"README": "hello\n", "src/main.c": "int main(){}\n", "gone.txt": "x\n"})
	launcherSum := fileSum(t, bed.Launcher)
	script := `
echo "ROOT:$(for f in /*; do printf '%s ' "${f#/}"; done)"
echo "MOUNTS:$(while read a b c d mp rest; do printf '%s ' "$mp"; done < /proc/self/mountinfo)"
echo "NET:$({ read h; read h; while read ifc rest; do printf '%s ' "$ifc"; done; } < /proc/net/dev)"
while read k v; do case $k in CapEff:|CapPrm:|CapBnd:|NoNewPrivs:|Uid:) echo "STATUS $k $v";; esac; done < /proc/self/status
read pid comm state ppid pgrp session tty rest < /proc/self/stat; echo "TTY:$tty SID:$session"
ls -l /proc/self/fd/ | while read m l o g s d1 d2 d3 fd arrow target; do [ "$m" = total ] || echo "FD $fd $target"; done
touch /etc/x 2>/dev/null && echo "ROOTFS:writable" || echo "ROOTFS:readonly"
touch /usr/bin/x 2>/dev/null && echo "USR:writable" || echo "USR:readonly"
cat /proc/1/exe >/dev/null 2>&1 && echo "EXE:readable" || echo "EXE:denied"
(echo x >> /proc/1/exe) 2>/dev/null && echo "EXEW:writable" || echo "EXEW:denied"
echo more >> /workspace/README && echo new > /workspace/new.txt && rm /workspace/gone.txt && mv /workspace/src/main.c /workspace/src/renamed.c && echo "WS:ok"
cat /workspace/README
[ -s /proc/kcore ] || [ -r /proc/kcore ] && echo "KCORE:$(head -c 16 /proc/kcore 2>/dev/null | wc -c)" || echo "KCORE:hidden"
grep -q ' /proc/sys ro,' /proc/self/mountinfo && echo "PROCSYS:ro" || echo "PROCSYS:rw"
`
	out, ex := run(t, d, ctx, ws, script)
	if ex.ExitCode == nil || *ex.ExitCode != 0 || !ex.Destroyed {
		t.Fatalf("worker did not exit cleanly and get destroyed: %+v\n%s", ex, out)
	}
	expect := []string{
		"NET:lo: ", "STATUS CapEff: 0000000000000000", "STATUS CapPrm: 0000000000000000", "STATUS CapBnd: 0000000000000000",
		"STATUS NoNewPrivs: 1", "STATUS Uid: 1000", "TTY:0", "ROOTFS:readonly", "USR:readonly", "EXE:denied", "EXEW:denied", "WS:ok", "hello\nmore\n", "PROCSYS:ro",
	}
	for _, e := range expect {
		if !strings.Contains(out, e) {
			t.Errorf("worker output lacks %q\n%s", e, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ROOT:") {
			for _, name := range strings.Fields(strings.TrimPrefix(line, "ROOT:")) {
				if _, err := os.Lstat(filepath.Join(bed.Rootfs, name)); err != nil {
					t.Errorf("worker sees /%s, which is not in its rootfs", name)
				}
			}
		}
		if strings.HasPrefix(line, "MOUNTS:") {
			var got []string
			for _, m := range strings.Fields(strings.TrimPrefix(line, "MOUNTS:")) {
				if !strings.HasPrefix(m, "/proc/") { // the masks over host-describing procfs entries
					got = append(got, m)
				}
			}
			want := "/ /proc /tmp /dev /dev/null /dev/zero /dev/full /dev/random /dev/urandom /run /workspace"
			if strings.Join(got, " ") != want {
				t.Errorf("mounts = %v, want %s", got, want)
			}
		}
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "FD" {
			n, _ := strconv.Atoi(f[1])
			if n > 2 && !(len(f) == 3 && strings.HasSuffix(f[2], "/fd")) {
				t.Errorf("worker inherited descriptor %s", line)
			}
		}
	}
	// The lower layer (the kernel's clone) is untouched.
	if b, _ := os.ReadFile(filepath.Join(lower, "README")); string(b) != "hello\n" {
		t.Errorf("lower README changed: %q", b)
	}
	for _, name := range []string{"gone.txt", "src/main.c"} {
		if _, err := os.Stat(filepath.Join(lower, name)); err != nil {
			t.Errorf("lower %s disappeared: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(lower, "new.txt")); err == nil {
		t.Errorf("a worker write reached the lower layer")
	}
	if fileSum(t, bed.Launcher) != launcherSum {
		t.Errorf("the launcher binary changed")
	}
}

func fileSum(t *testing.T, p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestUpperLayerHoldsWrites checks, on a running domain, that writes land
// in the upper layer, and that destroy removes it (overlay_rollback).
func TestUpperLayerHoldsWrites(t *testing.T) {
	d, ctx := setup(t)
	ws, lower := workspace(t, map[string]string{"a.txt": "lower\n"})
	id, r := startDomain(t, d, ctx, ws, "echo upper > /workspace/a.txt; echo done > /tmp/ready; sleep 600")
	upper := filepath.Join(bed.State, "domains", id, "upper")
	waitFor(t, func() bool { b, _ := os.ReadFile(filepath.Join(upper, "a.txt")); return string(b) == "upper\n" })
	if b, _ := os.ReadFile(filepath.Join(lower, "a.txt")); string(b) != "lower\n" {
		t.Fatalf("lower changed: %q", b)
	}
	st, err := d.Destroy(ctx, id)
	if err != nil || !st.Destroyed {
		t.Fatalf("destroy: %+v %v", st, err)
	}
	ex, _ := r.Wait()
	if ex == nil || ex.Killed != "external" {
		t.Errorf("exited = %+v, want killed_by external", ex)
	}
	if _, err := os.Stat(upper); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("upper layer survived destroy: %v", err)
	}
	assertNoTrace(t, id)
	// Destroy is idempotent.
	if st, err := d.Destroy(ctx, id); err != nil || st.Destroyed {
		t.Errorf("second destroy: %+v %v", st, err)
	}
}

// startDomain starts a long-running domain whose worker runs sh -c script.
func startDomain(t *testing.T, d *domain.Linux, ctx context.Context, ws, script string) (string, *domain.Running) {
	t.Helper()
	id := newID("d")
	r, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	// A test that fails before its own destroy must not leave its domain
	// alive in the bed's pool for every later test to find.
	t.Cleanup(func() { _, _ = d.Destroy(context.Background(), id) })
	return id, r
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDestroyKillsEscapedProcesses is the old_process_fork_cleanup gate: a
// double-forked daemon, a setsid child and a process whose parent exited
// are all dead after destroy, and the cgroup is proven empty.
func TestDestroyKillsEscapedProcesses(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id := newID("d")
	script := `(sh -c 'sleep 600 & exit 0' &) ; setsid sleep 601 & (sleep 602 &) ; sh -c 'sleep 603 & exit' ; echo spawned; sleep 604`
	r, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		st, err := d.Inspect(ctx, id)
		return err == nil && st.Processes >= 7 // init, stage/sh, five sleeps
	})
	before := cgroupPids(t, id)
	st, err := d.Destroy(ctx, id)
	if err != nil || !st.Destroyed {
		t.Fatalf("destroy: %+v %v", st, err)
	}
	if _, err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range before {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); !strings.Contains(string(b), "State:\tZ") {
				t.Errorf("pid %d of the domain survived destroy", pid)
			}
		}
	}
	assertNoTrace(t, id)
}

func cgroupPids(t *testing.T, id string) []int {
	b, err := os.ReadFile(filepath.Join(bed.CgroupParent, id, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, _ := strconv.Atoi(f)
		pids = append(pids, p)
	}
	return pids
}

func cgroupCPU(t *testing.T, id string) uint64 {
	b, err := os.ReadFile(filepath.Join(bed.CgroupParent, id, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	t.Fatal("no usage_usec")
	return 0
}

func TestFreezeStopsAndThawResumes(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "while :; do :; done")
	defer func() { _, _ = d.Destroy(ctx, id); _, _ = r.Wait() }()
	waitFor(t, func() bool { return cgroupCPU(t, id) > 50_000 })
	st, err := d.Freeze(ctx, id)
	if err != nil || !st.Frozen {
		t.Fatalf("freeze: %+v %v", st, err)
	}
	a := cgroupCPU(t, id)
	time.Sleep(300 * time.Millisecond)
	if b := cgroupCPU(t, id); b != a {
		t.Fatalf("CPU time grew while frozen: %d -> %d", a, b)
	}
	if st, err = d.Thaw(ctx, id); err != nil || st.Frozen {
		t.Fatalf("thaw: %+v %v", st, err)
	}
	waitFor(t, func() bool { return cgroupCPU(t, id) > a+50_000 })
}

// TestCheckpointRestoreReproducesView checkpoints a changed workspace,
// destroys the domain, restores into generation 2 and compares the merged
// view, including deletions, renames, empty dirs, symlinks and modes.
func TestCheckpointRestoreReproducesView(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, map[string]string{"keep.txt": "keep\n", "del.txt": "del\n", "old.txt": "old\n", "dir/inner.txt": "inner\n", "dir/x.txt": "x\n"})
	view := `ls -lnR --time-style=+%s /workspace; for f in $(ls -R /workspace | grep -v : ); do :; done; cat /workspace/keep.txt /workspace/new.txt /workspace/renamed.txt 2>&1`
	change := `cd /workspace && rm del.txt && mv old.txt renamed.txt && mkdir -p empty deep/er && ln -s keep.txt link && chmod 0600 keep.txt && echo more >> keep.txt && echo new > new.txt && rm -r dir && mkdir dir && echo fresh > dir/fresh.txt && chmod 0750 deep`
	id, r := startDomain(t, d, ctx, ws, change+" && "+view+"; echo ==END==; sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "==END==") })
	before := strings.Split(string(r.Output()), "==END==")[0]
	cp, err := d.Checkpoint(ctx, id)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if !protocol.ValidDigest(cp.SHA256) || cp.Entries == 0 {
		t.Fatalf("checkpoint result %+v", cp)
	}
	archiveReadableByTheKernelOnly(t, ctx, cp.SHA256)
	if st, _ := d.Inspect(ctx, id); st.Frozen {
		t.Fatalf("domain left frozen after checkpoint")
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	id2 := newID("d")
	r2, err := d.Create(ctx, domain.Spec{ID: id2, Generation: 2, WorkspaceID: ws, Checkpoint: cp.SHA256, Argv: []string{"/bin/sh", "-c", view}, OneShot: true})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if r2.Started.Restored != cp.SHA256 {
		t.Errorf("started.restored_from = %q", r2.Started.Restored)
	}
	if _, err := r2.Wait(); err != nil {
		t.Fatal(err)
	}
	after := string(r2.Output())
	if before != after {
		t.Fatalf("restored view differs\n--- before\n%s\n--- after\n%s", before, after)
	}
	for _, want := range []string{"renamed.txt", "link -> keep.txt", "empty", "fresh.txt", "drwxr-x---"} {
		if !strings.Contains(after, want) {
			t.Errorf("restored view lacks %q", want)
		}
	}
	for _, gone := range []string{"del.txt", "old.txt", "inner.txt"} {
		if strings.Contains(after, gone) {
			t.Errorf("restored view still has deleted %q", gone)
		}
	}
	assertNoTrace(t, id2)
}

func TestCorruptCheckpointIsRefused(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "echo data > /workspace/f; echo ok; sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ok") })
	cp, err := d.Checkpoint(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = d.Destroy(ctx, id)
	_, _ = r.Wait()
	path := filepath.Join(bed.State, "checkpoints", cp.SHA256+".tar")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	id2 := newID("d")
	_, err = d.Create(ctx, domain.Spec{ID: id2, Generation: 2, WorkspaceID: ws, Checkpoint: cp.SHA256, Argv: []string{"/bin/true"}, OneShot: true})
	if !errors.Is(err, protocol.E(protocol.CodeCheckpointCorrupt)) {
		t.Fatalf("create from corrupted checkpoint: %v, want checkpoint_corrupt", err)
	}
	assertNoTrace(t, id2)
}

func TestClosingMonitorStdinKillsDomain(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "sleep 600 & sleep 600")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	ex, err := r.Wait()
	if err != nil || ex.Killed != "kernel_gone" {
		t.Fatalf("exited = %+v, %v; want killed_by kernel_gone", ex, err)
	}
	st, err := d.Inspect(ctx, id)
	if err != nil || st.Populated {
		t.Fatalf("domain still populated after the kernel left: %+v %v", st, err)
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNoTrace(t, id)
}

func TestDestroyConcurrentWithCreate(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	for i := 0; i < 5; i++ {
		id := newID("d")
		created := make(chan error, 1)
		go func() {
			r, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/sleep", "600"}})
			if err == nil {
				_, err = r.Wait()
			}
			created <- err
		}()
		time.Sleep(time.Duration(i*15) * time.Millisecond)
		// Destroy until the create has ended: a destroy that ran before the
		// create claimed the id finds nothing, and the next one kills it.
		var err error
	wait:
		for {
			if _, derr := d.Destroy(ctx, id); derr != nil {
				t.Fatalf("destroy during create: %v", derr)
			}
			select {
			case err = <-created:
				break wait
			case <-time.After(200 * time.Millisecond):
			}
		}
		// Either the create lost the race (its directory vanished before it
		// was built) or it won and its worker was killed; both are fine,
		// provided nothing survives.
		if err != nil && !errors.Is(err, protocol.E(protocol.CodeDomainNotFound)) {
			t.Errorf("create %d failed with %v, want success or domain_not_found", i, err)
		}
		if _, err := d.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		assertNoTrace(t, id)
	}
}

func TestPreflightReportsHonestly(t *testing.T) {
	d, ctx := setup(t)
	rep, err := d.Preflight(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.CgroupV2 || !rep.CgroupKill || !rep.CgroupFreeze || !rep.RootfsMatches || len(rep.Namespaces) != 7 {
		t.Fatalf("preflight: %+v", rep)
	}
	// What the launcher may enforce is what the parent is offered (its
	// cgroup.controllers: the root's subtree_control), not what the root
	// has: under systemd the root has cpu, but offers it only on request.
	ctrl, _ := os.ReadFile(filepath.Join(bed.CgroupParent, "cgroup.controllers"))
	for _, l := range rep.Limits {
		want := map[string]string{"pids": "pids", "memory_bytes": "memory", "cpu_millis": "cpu"}[l.Name]
		if want != "" && l.Enforced != strings.Contains(string(ctrl), want) {
			t.Errorf("limit %s enforced=%v but parent controllers are %q", l.Name, l.Enforced, ctrl)
		}
	}
}

// TestPreflightVerifiesEveryRootfs: preflight opens each configured rootfs
// as a create does, so each is verified against its manifest then (its
// per-boot record written), not in the first domain naming it; one whose
// configured digest is not its manifest's is a problem named in the report.
func TestPreflightVerifiesEveryRootfs(t *testing.T) {
	d, ctx := setup(t)
	if err := bed.NameRootfs("warm", bed.Rootfs, bed.RootfsDigest); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(bed.State, "rootfs-verified-warm.json")
	if err := os.Remove(record); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	stale := strings.Repeat("0", 64)
	if err := bed.NameRootfs("stale", bed.Rootfs, stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.NameRootfs("stale", bed.Rootfs, bed.RootfsDigest) })
	rep, err := d.Preflight(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(record); err != nil {
		t.Errorf("preflight did not verify rootfs warm: %v", err)
	}
	found := false
	for _, p := range rep.Problems {
		found = found || strings.HasPrefix(p, `rootfs "stale" differs from its manifest`)
		if strings.Contains(p, `"warm"`) {
			t.Errorf("a problem with the rootfs that matches: %s", p)
		}
	}
	if !found || rep.Verdict == "ok" {
		t.Errorf("preflight with a rootfs that is not its manifest: verdict %s, problems %q", rep.Verdict, rep.Problems)
	}
	// What a create may name (autonomic run's choice of environment reads
	// it): the rootfs that verified, never the one that did not.
	if !slices.Contains(rep.Rootfses, "warm") || slices.Contains(rep.Rootfses, "stale") {
		t.Errorf("preflight lists rootfses %q, want warm and not stale", rep.Rootfses)
	}
}

// TestMonitorDeathKillsDomain: if the monitor is killed outright (no chance
// to clean up), the init's parent-death signal takes the domain down.
func TestMonitorDeathKillsDomain(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "sleep 600 & sleep 600")
	if err := syscall.Kill(r.MonitorPID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(); err == nil {
		t.Fatal("monitor killed, yet an exited frame arrived")
	}
	waitFor(t, func() bool {
		st, err := d.Inspect(ctx, id)
		return err == nil && !st.Populated
	})
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNoTrace(t, id)
}

// archiveReadableByTheKernelOnly: the checkpoint store is root's, and the
// kernel's account (workspace_owner_uid/gid) — and no one else — reads an
// archive, as the harvest does on an installed host; what it reads hashes
// to the digest the launcher returned.
func archiveReadableByTheKernelOnly(t *testing.T, ctx context.Context, digest string) {
	t.Helper()
	dir := filepath.Join(bed.State, "checkpoints")
	archive := filepath.Join(dir, digest+".tar")
	for p, want := range map[string]os.FileMode{dir: os.ModeDir | 0o750, archive: 0o640} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != want || st.Uid != 0 || int(st.Gid) != bed.OwnerGID {
			t.Errorf("%s: %v %d:%d, want %v 0:%d", p, fi.Mode(), st.Uid, st.Gid, want, bed.OwnerGID)
		}
	}
	read := func(uid, gid int) (string, error) {
		cmd := exec.CommandContext(ctx, "sha256sum", archive)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := read(bed.OwnerUID, bed.OwnerGID); err != nil || !strings.HasPrefix(out, digest+" ") {
		t.Errorf("the kernel's account reads the archive as %q (%v), want its digest", out, err)
	}
	if out, err := read(65534, 65534); err == nil {
		t.Errorf("nobody read the archive: %q", out)
	}
}
