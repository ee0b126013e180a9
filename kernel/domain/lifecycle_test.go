package domain_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// launcherWithNOFILE runs one launcher request the way a caller who ran
// `ulimit -n n` first would, and returns its first frame (nil if it sent
// none).
func launcherWithNOFILE(t *testing.T, n int, req map[string]any) *protocol.LauncherResponse {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "ulimit -n "+strconv.Itoa(n)+" && exec \"$0\"", bed.Launcher)
	cmd.Stdin = bytes.NewReader(jsonFrame(t, req))
	out, _ := cmd.Output()
	b, err := protocol.ReadFrame(bytes.NewReader(out), protocol.LauncherResponseMax, time.Time{})
	if err != nil {
		return nil
	}
	r, err := protocol.DecodeLauncherResponse(b)
	if err != nil {
		t.Fatalf("inadmissible frame under nofile %d: %v", n, err)
	}
	return r
}

func lifecycleReq(action, id string) map[string]any {
	return map[string]any{"protocol": 1, "action": action, "request_id": "nofile", "domain_id": id}
}

// slotHeld reports whether id holds a uid slot.
func slotHeld(id string) bool {
	slots, _ := os.ReadDir(filepath.Join(bed.State, "slots"))
	for _, s := range slots {
		if target, _ := os.Readlink(filepath.Join(bed.State, "slots", s.Name())); target == id {
			return true
		}
	}
	return false
}

// liveInRange lists live processes whose real uid lies in [base, base+65536).
func liveInRange(base uint32) []int {
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
				if uint32(uid) >= base && uint32(uid)-base < 65536 {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

// TestDestroyFailsClosedUnderLowNOFILE: whatever descriptor limit the
// caller leaves the launcher, a destroy either finishes or fails without
// freeing the domain's uid range while any of its processes lives. (Under
// `ulimit -n 13` the launcher used to skip the kill, free the range and
// leave the domain running, and the next create got the same ids.)
func TestDestroyFailsClosedUnderLowNOFILE(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "sleep 600 & sleep 601")
	base := r.Started.UIDBase
	waitFor(t, func() bool { return len(liveInRange(base)) >= 2 })
	refused := 0
	for n := 4; n <= 24; n++ {
		resp := launcherWithNOFILE(t, n, lifecycleReq("destroy", id))
		if resp == nil || resp.Type == protocol.TypeError {
			refused++
		}
		if live := liveInRange(base); !slotHeld(id) && len(live) > 0 {
			t.Fatalf("nofile %d: uid slot of %s freed while %v still run (answer %+v)", n, id, live, resp)
		}
		if resp != nil && resp.Type == protocol.TypeDomain && resp.Domain.Destroyed {
			break
		}
	}
	if refused == 0 {
		t.Fatal("no descriptor limit made destroy fail: the test exercises nothing")
	}
	if st, err := d.Destroy(ctx, id); err != nil {
		t.Fatalf("destroy with ordinary limits: %+v %v", st, err)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}

// TestCheckpointFailsClosedUnderLowNOFILE: a checkpoint under any
// descriptor limit either fails or archives a domain that was frozen
// while it did (cgroup.events seen frozen during the call); it never
// archives a running one.
func TestCheckpointFailsClosedUnderLowNOFILE(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	// 32 MiB in the upper layer makes the archive take long enough for the
	// poller to see the freeze it must happen under.
	id, r := startDomain(t, d, ctx, ws, "head -c 33554432 /dev/zero > /workspace/big && echo ready && sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
	events := filepath.Join(bed.CgroupParent, id, "cgroup.events")
	refused, archived := 0, 0
	for n := 4; n <= 24; n++ {
		var sawFrozen atomic.Bool
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if b, _ := os.ReadFile(events); strings.Contains(string(b), "frozen 1") {
					sawFrozen.Store(true)
				}
			}
		}()
		resp := launcherWithNOFILE(t, n, lifecycleReq("checkpoint", id))
		close(stop)
		<-done
		switch {
		case resp != nil && resp.Type == protocol.TypeCheckpoint:
			archived++
			if !sawFrozen.Load() {
				t.Fatalf("nofile %d: checkpoint %s archived a domain never seen frozen", n, resp.Checkpoint.SHA256)
			}
		default:
			refused++
		}
		if st, err := d.Inspect(ctx, id); err != nil || st.Frozen {
			t.Fatalf("nofile %d: domain left frozen or gone: %+v %v", n, st, err)
		}
	}
	if refused == 0 || archived == 0 {
		t.Fatalf("refused %d, archived %d: the limits tried exercise only one path", refused, archived)
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}

// running reports whether pid is alive and not a zombie (a killed child
// stays a zombie until reaped, and signal 0 still reaches it).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return rest != "" && rest[0] != 'Z' && rest[0] != 'X'
}

// TestUnreadableCgroupRecordFailsClosed: when the launcher cannot tell which
// cgroup is the domain's (its record is corrupt), checkpoint archives
// nothing and destroy frees nothing: the domain keeps running and keeps its
// uid range until the record is readable again.
func TestUnreadableCgroupRecordFailsClosed(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "echo ready; sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
	base := r.Started.UIDBase
	rec := filepath.Join(bed.State, "domains", id, "cgroup")
	good, err := os.ReadFile(rec)
	if err != nil {
		t.Fatalf("no cgroup record: %v", err)
	}
	if err := os.WriteFile(rec, []byte("not a number"), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(filepath.Join(bed.State, "checkpoints"))
	if _, err := d.Checkpoint(ctx, id); !errors.Is(err, protocol.E(protocol.CodeLauncherFailed)) {
		t.Fatalf("checkpoint with an unreadable record: %v, want launcher_failed", err)
	}
	if after, _ := os.ReadDir(filepath.Join(bed.State, "checkpoints")); len(after) != len(before) {
		t.Fatal("checkpoint archived a domain it could not freeze")
	}
	if _, err := d.Destroy(ctx, id); !errors.Is(err, protocol.E(protocol.CodeLauncherFailed)) {
		t.Fatalf("destroy with an unreadable record: %v, want launcher_failed", err)
	}
	if !slotHeld(id) || len(liveInRange(base)) == 0 {
		t.Fatal("a failed destroy freed the uid range or killed the domain")
	}
	if err := os.WriteFile(rec, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Destroy(ctx, id); err != nil || !st.Destroyed {
		t.Fatalf("destroy once the record is readable: %+v %v", st, err)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}

// limitedLauncher is the bed's launcher run the way sudo runs it for a
// caller with low limits: sudo passes on the caller's file-size and CPU
// limits (RLIMIT_FSIZE of 3 bytes cut a cgroup id 8537 to 853).
func limitedLauncher(t *testing.T, limits ...string) *domain.Linux {
	t.Helper()
	wrapper := filepath.Join(bed.Dir, "bin", "limited-"+newID("l"))
	script := "#!/bin/sh\nexec /usr/bin/prlimit " + strings.Join(limits, " ") + " -- " + bed.Launcher + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("/usr/bin/prlimit"); err != nil {
		t.Fatal("prlimit(1) is required: util-linux, essential on Debian and Ubuntu")
	}
	return &domain.Linux{LauncherPath: wrapper, Direct: true}
}

// TestDestroyUnderLowFSIZE: a launcher started with a caller's tiny
// RLIMIT_FSIZE (and RLIMIT_CPU) writes its records whole or not at all:
// with the hard limit high it raises its own and creates; with the hard
// limit low too (a host that denies root CAP_SYS_RESOURCE cannot raise it)
// the create is refused and leaves nothing. A destroy under the low limits
// kills the domain and only then frees its range; and a populated cgroup
// whose record does not match (a record cut short before this fix) makes
// destroy fail closed: nothing killed, nothing freed, until the record is
// right again.
func TestDestroyUnderLowFSIZE(t *testing.T) {
	_, ctx := setup(t)
	soft := limitedLauncher(t, "--fsize=3:unlimited", "--cpu=60:unlimited")
	hard := limitedLauncher(t, "--fsize=3:3", "--cpu=60:60")
	ws, _ := workspace(t, nil)

	refused := newID("fs")
	if r, err := hard.Create(ctx, domain.Spec{ID: refused, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/sh", "-c", "sleep 600"}}); err == nil {
		// This host let root raise its hard limit: the records must be whole.
		checkCgroupRecord(t, refused)
		if st, err := hard.Destroy(ctx, refused); err != nil || !st.Destroyed {
			t.Fatalf("destroy: %+v %v", st, err)
		}
		_, _ = r.Wait()
	}
	assertNoTrace(t, refused)

	id, r := startDomain(t, soft, ctx, ws, "echo ready; sleep 600 & sleep 601")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
	base := r.Started.UIDBase
	good := checkCgroupRecord(t, id)
	// A record cut short names another cgroup: destroy must not take the
	// domain's populated one for someone else's.
	rec := filepath.Join(bed.State, "domains", id, "cgroup")
	if err := os.WriteFile(rec, good[:len(good)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := hard.Destroy(ctx, id); err == nil {
		t.Fatalf("destroy with a mismatched record over a populated cgroup: %+v, want an error", st)
	}
	if !slotHeld(id) || len(liveInRange(base)) == 0 {
		t.Fatal("a destroy that could not prove the cgroup its own freed the range or killed the domain")
	}
	if err := os.WriteFile(rec, good, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := hard.Destroy(ctx, id)
	if err != nil || !st.Destroyed {
		t.Fatalf("destroy under RLIMIT_FSIZE 3: %+v %v", st, err)
	}
	if live := liveInRange(base); len(live) > 0 || slotHeld(id) {
		t.Fatalf("destroyed, yet %v still run (slot held: %v)", live, slotHeld(id))
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}

// checkCgroupRecord returns the domain's cgroup record, failing unless it
// is the whole id of the domain's cgroup.
func checkCgroupRecord(t *testing.T, id string) []byte {
	t.Helper()
	good, err := os.ReadFile(filepath.Join(bed.State, "domains", id, "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(bed.CgroupParent, id), &st); err != nil || strconv.FormatUint(st.Ino, 10) != string(good) {
		t.Fatalf("cgroup record %q, cgroup id %d (%v): written short", good, st.Ino, err)
	}
	return good
}

// TestForeignCgroupIsNeverTouched: a cgroup under cgroup_parent named like
// the domain, with a process of someone else's in it, makes create fail
// with cgroup_foreign, and the failed create's cleanup neither kills that
// process nor removes the cgroup.
func TestForeignCgroupIsNeverTouched(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id := newID("fc")
	if err := os.MkdirAll(bed.CgroupParent, 0o755); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(bed.CgroupParent, id)
	if err := os.Mkdir(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleeper.Process.Kill()
		_ = sleeper.Wait()
		for i := 0; i < 100 && os.Remove(foreign) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(foreign, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	_, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/true"}, OneShot: true})
	if !errors.Is(err, protocol.E(protocol.CodeCgroupForeign)) {
		t.Fatalf("create over a foreign cgroup: %v, want cgroup_foreign", err)
	}
	if !running(sleeper.Process.Pid) {
		t.Fatal("the foreign process was killed")
	}
	procs, err := os.ReadFile(filepath.Join(foreign, "cgroup.procs"))
	if err != nil || strings.TrimSpace(string(procs)) != strconv.Itoa(sleeper.Process.Pid) {
		t.Fatalf("foreign cgroup changed: %q %v", procs, err)
	}
	// A destroy of the id touches it no more than the failed create did.
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if !running(sleeper.Process.Pid) {
		t.Fatal("destroy killed the foreign process")
	}
	if _, err := os.Stat(filepath.Join(bed.State, "domains", id)); !errors.Is(err, os.ErrNotExist) || slotHeld(id) {
		t.Fatalf("failed create left its domain dir or uid slot: %v", err)
	}
}

// TestDeepTreeIsDestroyed: a worker nesting 21,000 directories (more than
// any descriptor limit a one-descriptor-per-level walk would meet) cannot
// make its domain undeletable; a checkpoint of it is refused with a typed
// error and leaves no partial archive and the domain running.
func TestDeepTreeIsDestroyed(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, testbed.ProbePath+" nest && sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "nest=") })
	if out := string(r.Output()); !strings.Contains(out, "nest=<nil>") {
		t.Fatalf("worker could not nest: %s", out)
	}
	// Both under a descriptor limit of 1024, as a caller (or sudo's
	// defaults) may leave it: far below the tree's depth.
	before, _ := os.ReadDir(filepath.Join(bed.State, "checkpoints"))
	resp := launcherWithNOFILE(t, 1024, lifecycleReq("checkpoint", id))
	if resp == nil || resp.Type != protocol.TypeError || resp.Error.Code != protocol.CodeCheckpointTooLarge {
		t.Fatalf("checkpoint of a 21,000-deep tree: %+v, want checkpoint_too_large", resp)
	}
	after, _ := os.ReadDir(filepath.Join(bed.State, "checkpoints"))
	if len(after) != len(before) {
		t.Errorf("failed checkpoint left files in the store: %d before, %d after", len(before), len(after))
	}
	if st, err := d.Inspect(ctx, id); err != nil || st.Frozen || st.Processes == 0 {
		t.Fatalf("domain after refused checkpoint: %+v %v", st, err)
	}
	if resp := launcherWithNOFILE(t, 1024, lifecycleReq("destroy", id)); resp == nil || resp.Type != protocol.TypeDomain || !resp.Domain.Destroyed {
		t.Fatalf("destroy of a 21,000-deep upper layer: %+v", resp)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}

// TestOverlongPathIsNotArchived: a path longer than PATH_MAX in the upper
// layer could be archived but never restored (restore opens each parent by
// its whole path), so checkpoint refuses it with checkpoint_too_large.
func TestOverlongPathIsNotArchived(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, testbed.ProbePath+" longpath && sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "longpath=") })
	if out := string(r.Output()); !strings.Contains(out, "longpath=<nil>") {
		t.Fatalf("worker could not make the path: %s", out)
	}
	if _, err := d.Checkpoint(ctx, id); !errors.Is(err, protocol.E(protocol.CodeCheckpointTooLarge)) {
		t.Fatalf("checkpoint of a 5,000-byte path: %v, want checkpoint_too_large", err)
	}
	if st, err := d.Destroy(ctx, id); err != nil || !st.Destroyed {
		t.Fatalf("destroy: %+v %v", st, err)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}

// storeCheckpoint writes an archive into the bed's store under its digest.
func storeCheckpoint(t *testing.T, archive []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(bed.State, "checkpoints"), 0o700); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(archive)
	digest := hex.EncodeToString(sum[:])
	p := filepath.Join(bed.State, "checkpoints", digest+".tar")
	if err := os.WriteFile(p, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(p) })
	return digest
}

// ustarBlock is one ustar header block; archive/tar's writer will not emit
// GNU sparse records, so the hostile archive is assembled by hand.
func ustarBlock(name string, typ byte, size int) []byte {
	b := make([]byte, 512)
	copy(b, name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], "00000000000\x00")
	b[156] = typ
	copy(b[257:], "ustar\x0000")
	copy(b[148:], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func pad512(b []byte) []byte { return append(b, make([]byte, (512-len(b)%512)%512)...) }

// sparseArchive is a PAX GNU-sparse (1.0) entry: a few KiB of archive that
// archive/tar expands to size bytes of zeros.
func sparseArchive(t *testing.T, size int64) []byte {
	t.Helper()
	var pax []byte
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"}, {"GNU.sparse.name", "big"}, {"GNU.sparse.realsize", strconv.FormatInt(size, 10)}} {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec) + 1
		for len(strconv.Itoa(n))+len(rec) != n {
			n++
		}
		pax = append(pax, strconv.Itoa(n)+rec...)
	}
	// The 1.0 format keeps its map in the data: one fragment of one byte
	// at the very end, after a block-padded map.
	data := append(pad512([]byte(fmt.Sprintf("1\n%d\n1\n", size-1))), 'x')
	var buf []byte
	buf = append(buf, ustarBlock("PaxHeaders/big", 'x', len(pax))...)
	buf = append(buf, pad512(pax)...)
	buf = append(buf, ustarBlock("GNUSparseFile.0/big", '0', len(data))...)
	buf = append(buf, pad512(data)...)
	buf = append(buf, make([]byte, 1024)...)
	// Prove the archive is what the test claims: archive/tar expands it.
	tr := tar.NewReader(bytes.NewReader(buf))
	h, err := tr.Next()
	if err != nil || h.Size != size || h.Name != "big" {
		t.Fatalf("crafted sparse entry reads back as %+v, %v", h, err)
	}
	n, err := io.Copy(io.Discard, tr)
	if err != nil || n != size {
		t.Fatalf("crafted sparse entry expands to %d bytes, %v", n, err)
	}
	return buf
}

// TestSparseRestoreIsRefused: a 10 KiB archive whose PAX sparse map expands
// to 50 MiB is refused before anything is written, whatever the byte cap.
func TestSparseRestoreIsRefused(t *testing.T) {
	_, _ = setup(t)
	ws, _ := workspace(t, nil)
	archive := sparseArchive(t, 50<<20)
	if len(archive) > 10<<10 {
		t.Fatalf("archive is %d bytes", len(archive))
	}
	id := newID("sp")
	req := createReq(id, ws)
	req["checkpoint"] = storeCheckpoint(t, archive)
	r := rawRequest(t, jsonFrame(t, req))
	if r.Type != protocol.TypeError || r.Error.Code != protocol.CodeCheckpointUnsafe {
		t.Fatalf("got %s %+v, want checkpoint_unsafe", r.Type, r.Error)
	}
	assertNoTrace(t, id)
}

// withConfig rewrites the bed's launcher configuration for one test.
func withConfig(t *testing.T, edit func(string) string) {
	t.Helper()
	orig, err := os.ReadFile(bed.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(bed.ConfigPath, orig, 0o644) })
	if err := os.WriteFile(bed.ConfigPath, []byte(edit(string(orig))), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointStoreCap: once the store holds max_checkpoint_store_bytes,
// a checkpoint is refused with checkpoint_store_full and stores nothing;
// the domain runs on.
func TestCheckpointStoreCap(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "head -c 1048576 /dev/zero > /workspace/big && echo ready && sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
	store := filepath.Join(bed.State, "checkpoints")
	var used int64
	entries, _ := os.ReadDir(store)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			used += fi.Size()
		}
	}
	// Room for one more 1 MiB archive, not for two.
	limit := used + 3<<19
	withConfig(t, func(c string) string {
		return strings.Replace(c, `"max_checkpoint_bytes"`, fmt.Sprintf(`"max_checkpoint_store_bytes": %d, "max_checkpoint_bytes"`, limit), 1)
	})
	// What a crashed checkpoint left behind is not the store's content.
	stale := filepath.Join(store, ".tmp-0123456789abcdef")
	if err := os.WriteFile(stale, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := d.Checkpoint(ctx, id)
	if err != nil {
		t.Fatalf("first checkpoint, within the cap: %v", err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a crashed checkpoint's temporary archive is still there: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(filepath.Join(store, cp.SHA256+".tar")) })
	// A second, different archive would pass the cap.
	if _, err := d.Freeze(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bed.State, "domains", id, "upper", "more"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Thaw(ctx, id); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(store)
	if _, err := d.Checkpoint(ctx, id); !errors.Is(err, protocol.E(protocol.CodeCheckpointStoreFull)) {
		t.Fatalf("checkpoint over the store cap: %v, want checkpoint_store_full", err)
	}
	if after, _ := os.ReadDir(store); len(after) != len(before) {
		t.Errorf("refused checkpoint changed the store: %d files before, %d after", len(before), len(after))
	}
	if st, err := d.Inspect(ctx, id); err != nil || st.Frozen || st.Processes == 0 {
		t.Fatalf("domain after refused checkpoint: %+v %v", st, err)
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}

// storeState is the checkpoint store's file count and bytes.
func storeState() (int, int64) {
	entries, _ := os.ReadDir(filepath.Join(bed.State, "checkpoints"))
	var used int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			used += fi.Size()
		}
	}
	return len(entries), used
}

// plantInUpper writes into a running domain's upper layer from the host,
// as its worker could, with the domain frozen meanwhile.
func plantInUpper(t *testing.T, d *domain.Linux, ctx context.Context, id string, plant func(upper string) error) {
	t.Helper()
	if _, err := d.Freeze(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := plant(filepath.Join(bed.State, "domains", id, "upper")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Thaw(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestSparseFileCannotFillTheStore: a checkpoint archives no more than the
// upper layer holds. A sparse 60 MiB file (one page on the domain's
// tmpfs) is refused as checkpoint_unsafe, not written out as 60 MiB of
// zeros; a file hard-linked under ten names, its data archived once per
// name, may not make the archive's data pass disk_bytes
// (checkpoint_too_large). Either way the store is unchanged and the domain
// runs on.
func TestSparseFileCannotFillTheStore(t *testing.T) {
	d, ctx := setup(t)
	withConfig(t, func(c string) string {
		return strings.Replace(c, `"max_checkpoint_bytes"`, `"disk_bytes": 8388608, "max_checkpoint_bytes"`, 1)
	})
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "echo ready; sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
	for _, tc := range []struct {
		name  string
		plant func(upper string) error
		want  protocol.Code
	}{
		{"sparse", func(upper string) error {
			f, err := os.Create(filepath.Join(upper, "sparse"))
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("x"), 60<<20-1)
			return err
		}, protocol.CodeCheckpointUnsafe},
		{"hard links", func(upper string) error {
			_ = os.Remove(filepath.Join(upper, "sparse"))
			if err := os.WriteFile(filepath.Join(upper, "dense"), bytes.Repeat([]byte("y"), 2<<20), 0o644); err != nil {
				return err
			}
			for i := 0; i < 9; i++ {
				if err := os.Link(filepath.Join(upper, "dense"), filepath.Join(upper, fmt.Sprintf("link%d", i))); err != nil {
					return err
				}
			}
			return nil
		}, protocol.CodeCheckpointTooLarge},
	} {
		plantInUpper(t, d, ctx, id, tc.plant)
		files, used := storeState()
		if res, err := d.Checkpoint(ctx, id); !errors.Is(err, protocol.E(tc.want)) {
			t.Fatalf("%s: checkpoint %+v, %v; want %s", tc.name, res, err, tc.want)
		}
		if f2, u2 := storeState(); f2 != files || u2 != used {
			t.Fatalf("%s: the refused checkpoint changed the store: %d files %d bytes, then %d, %d", tc.name, files, used, f2, u2)
		}
		if st, err := d.Inspect(ctx, id); err != nil || st.Frozen || st.Processes == 0 {
			t.Fatalf("%s: domain after refused checkpoint: %+v %v", tc.name, st, err)
		}
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}

// archived reports whether the store holds digest.
func archived(digest string) bool {
	_, err := os.Stat(filepath.Join(bed.State, "checkpoints", digest+".tar"))
	return err == nil
}

// plantFile writes one file of content with a fixed mtime into a running
// domain's upper layer, so two domains archive to one digest.
func plantFile(t *testing.T, d *domain.Linux, ctx context.Context, id, name string, content []byte) {
	t.Helper()
	plantInUpper(t, d, ctx, id, func(upper string) error {
		p := filepath.Join(upper, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return err
		}
		return os.Chtimes(p, time.Unix(1e9, 0), time.Unix(1e9, 0))
	})
}

// TestCheckpointReleased: every archive is held by the domain that took it
// until that domain releases it (protocol version 2), and deleted once no
// domain holds it: two domains archiving the same upper layer share one
// archive, which the first release keeps and the second deletes; a
// repeated release succeeds and deletes nothing; release in a version-1
// request is unsupported_version.
func TestCheckpointReleased(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	content := []byte("released " + newID("c"))
	var ids []string
	var digest string
	for i := 0; i < 2; i++ {
		id, r := startDomain(t, d, ctx, ws, "echo ready; sleep 600")
		waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
		plantFile(t, d, ctx, id, "f", content)
		cp, err := d.Checkpoint(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if digest != "" && cp.SHA256 != digest {
			t.Fatalf("the same upper layer archived as %s and %s", digest, cp.SHA256)
		}
		digest = cp.SHA256
		ids = append(ids, id)
		if _, err := d.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		_, _ = r.Wait()
	}
	if !archived(digest) {
		t.Fatal("checkpoint not in the store")
	}
	v1 := map[string]any{"protocol": 1, "action": "release", "request_id": "r", "domain_id": ids[0], "checkpoint": digest}
	if r := rawRequest(t, jsonFrame(t, v1)); r.Type != protocol.TypeError || r.Error.Code != protocol.CodeUnsupportedVersion {
		t.Fatalf("release as version 1: %s %+v", r.Type, r.Error)
	}
	// Destroyed domains still hold their archives: a later create restores them.
	res, err := d.Release(ctx, ids[0], digest)
	if err != nil || !res.Released || res.Deleted || !archived(digest) {
		t.Fatalf("first release: %+v %v (archived %v); the other domain still holds it", res, err, archived(digest))
	}
	res, err = d.Release(ctx, ids[1], digest)
	if err != nil || !res.Released || !res.Deleted || archived(digest) {
		t.Fatalf("last release: %+v %v (archived %v)", res, err, archived(digest))
	}
	res, err = d.Release(ctx, ids[1], digest)
	if err != nil || res.Deleted {
		t.Fatalf("repeated release: %+v %v", res, err)
	}
	for _, id := range ids {
		if _, err := os.Lstat(filepath.Join(bed.State, "holds", id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("holds of %s left behind: %v", id, err)
		}
		assertNoTrace(t, id)
	}
}

// TestStoreQuotaPerDomain: the archives one domain holds are capped
// together at max_checkpoint_domain_bytes: a domain at its quota gets
// checkpoint_store_full and the store is unchanged, while another domain
// still checkpoints; a release gives the first its room back.
func TestStoreQuotaPerDomain(t *testing.T) {
	d, ctx := setup(t)
	withConfig(t, func(c string) string {
		return strings.Replace(c, `"max_checkpoint_bytes"`, `"max_checkpoint_domain_bytes": 1572864, "max_checkpoint_bytes"`, 1)
	})
	ws, _ := workspace(t, nil)
	big := bytes.Repeat([]byte("q"), 1<<20)
	start := func() (string, *domain.Running) {
		id, r := startDomain(t, d, ctx, ws, "echo ready; sleep 600")
		waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
		plantFile(t, d, ctx, id, "big", append([]byte(id), big...))
		return id, r
	}
	a, ra := start()
	first, err := d.Checkpoint(ctx, a)
	if err != nil {
		t.Fatalf("first checkpoint, within the quota: %v", err)
	}
	plantFile(t, d, ctx, a, "more", []byte("more"))
	files, used := storeState()
	if res, err := d.Checkpoint(ctx, a); !errors.Is(err, protocol.E(protocol.CodeCheckpointStoreFull)) {
		t.Fatalf("checkpoint over the domain's quota: %+v %v, want checkpoint_store_full", res, err)
	}
	if f2, u2 := storeState(); f2 != files || u2 != used {
		t.Fatalf("the refused checkpoint changed the store: %d files %d bytes, then %d, %d", files, used, f2, u2)
	}
	if st, err := d.Inspect(ctx, a); err != nil || st.Frozen || st.Processes == 0 {
		t.Fatalf("domain after refused checkpoint: %+v %v", st, err)
	}
	b, rb := start()
	other, err := d.Checkpoint(ctx, b)
	if err != nil {
		t.Fatalf("another domain's checkpoint, with its own quota: %v", err)
	}
	if _, err := d.Release(ctx, a, first.SHA256); err != nil {
		t.Fatal(err)
	}
	second, err := d.Checkpoint(ctx, a)
	if err != nil {
		t.Fatalf("checkpoint after a release: %v", err)
	}
	for id, digest := range map[string]string{a: second.SHA256, b: other.SHA256} {
		if res, err := d.Release(ctx, id, digest); err != nil || !res.Deleted {
			t.Fatalf("release: %+v %v", res, err)
		}
		if _, err := d.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = ra.Wait()
	_, _ = rb.Wait()
	assertNoTrace(t, a)
	assertNoTrace(t, b)
}

// TestOneShotMonitorSparesItsSuccessor: a one-shot monitor whose domain
// was destroyed and re-created under the same id while the monitor waited
// for the domain lock must not destroy the successor. The test holds the
// lock, kills the first domain, removes it as a destroy would, creates the
// second, and only then lets the first monitor's own destroy proceed.
func TestOneShotMonitorSparesItsSuccessor(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id := newID("os")
	first, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/sh", "-c", "sleep 600"}, OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(bed.State, "domains", id)
	lock, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join(bed.CgroupParent, id)
	if err := os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(cg, "cgroup.events"))
		return strings.Contains(string(b), "populated 0")
	})
	time.Sleep(500 * time.Millisecond) // the monitor reaches its destroy and waits for the lock
	// The domain's bounded layers are the launcher's two host mounts in
	// its directory: detach them as destroy would before removing it.
	for _, m := range []string{"upper", "layers"} {
		_ = syscall.Unmount(filepath.Join(dir, m), syscall.MNT_DETACH)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(cg); err != nil {
		t.Fatal(err)
	}
	slots, _ := os.ReadDir(filepath.Join(bed.State, "slots"))
	for _, s := range slots {
		if target, _ := os.Readlink(filepath.Join(bed.State, "slots", s.Name())); target == id {
			_ = os.Remove(filepath.Join(bed.State, "slots", s.Name()))
		}
	}
	second, err := d.Create(ctx, domain.Spec{ID: id, Generation: 2, WorkspaceID: ws, Argv: []string{"/bin/sh", "-c", "echo up; sleep 600"}})
	if err != nil {
		t.Fatalf("re-create: %v", err)
	}
	waitFor(t, func() bool { return strings.Contains(string(second.Output()), "up") })
	_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	ex, err := first.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if ex.Destroyed {
		t.Errorf("the first monitor reports destroying a domain: %+v", ex)
	}
	st, err := d.Inspect(ctx, id)
	if err != nil || !st.Exists || st.Generation != 2 || st.Processes == 0 || !slotHeld(id) {
		t.Fatalf("the successor did not survive the first monitor: %+v %v", st, err)
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = second.Wait()
	assertNoTrace(t, id)
}

// TestRootfsContentIsItsIdentity: a copy of the bed's rootfs with one file
// added, or one file's content changed, still has the configured manifest
// digest, and create refuses it with rootfs_mismatch; the untouched copy is
// accepted, so the refusal is the change's.
func TestRootfsContentIsItsIdentity(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	// Each copy takes the place (and often the inode number) of the one
	// before it, as a replaced rootfs would; the untouched copy goes first
	// so that its verification is on record when the changed ones come.
	type variant struct {
		name   string
		change func(root string) error
	}
	for _, v := range []variant{
		{"untouched", func(string) error { return nil }},
		{"added", func(root string) error {
			return os.WriteFile(filepath.Join(root, "usr", "bin", "extra"), []byte("#!/bin/sh\n"), 0o755)
		}},
		{"modified", func(root string) error {
			p := filepath.Join(root, "etc", "hosts")
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[0] ^= 1 // same size, other content
			return os.WriteFile(p, b, 0o644)
		}},
		{"chmod", func(root string) error { return os.Chmod(filepath.Join(root, "etc", "hosts"), 0o666) }},
	} {
		name, change := v.name, v.change
		t.Run(name, func(t *testing.T) {
			root := filepath.Join(bed.Dir, "rootfs-copy")
			if out, err := exec.Command("cp", "-a", bed.Rootfs, root).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			t.Cleanup(func() { _ = os.RemoveAll(root) })
			if err := change(root); err != nil {
				t.Fatal(err)
			}
			withConfig(t, func(c string) string {
				return strings.Replace(c, fmt.Sprintf("%q", bed.Rootfs), fmt.Sprintf("%q", root), 1)
			})
			id := newID("rf")
			r, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/true"}, OneShot: true})
			if name == "untouched" {
				if err != nil {
					t.Fatalf("create on an untouched copy: %v", err)
				}
				_, _ = r.Wait()
			} else if !errors.Is(err, protocol.E(protocol.CodeRootfsMismatch)) {
				t.Fatalf("create on a %s copy: %v, want rootfs_mismatch", name, err)
			}
			assertNoTrace(t, id)
		})
	}
}

// TestPreflightNamesEveryFeature: preflight names each host feature the
// product uses, found or missing; every required one is found on every host
// of the matrix, and the optional SO_PEERPIDFD is found exactly where the
// kernel has it (Linux 6.5: this host's 6.18 does, Debian 12's 6.1 does
// not, and the verdict stays OK there).
func TestPreflightNamesEveryFeature(t *testing.T) {
	d, ctx := setup(t)
	rep, err := d.Preflight(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &major, &minor)
	hasPeerPidfd := major > 6 || major == 6 && minor >= 5
	got := map[string]protocol.Feature{}
	for _, f := range rep.Features {
		got[f.Name] = f
	}
	for _, name := range []string{"namespaces", "user_namespaces_enabled", "cgroup_v2", "cgroup_freeze", "cgroup_kill", "clone_into_cgroup",
		"openat2", "close_range_cloexec", "mount_api", "idmapped_mounts", "overlay_in_userns", "overlay_over_idmapped_layers",
		"seccomp_user_notif", "seccomp_wait_killable_recv", "pidfd_open", "so_peerpidfd"} {
		f, ok := got[name]
		if !ok {
			t.Errorf("preflight does not name %s", name)
			continue
		}
		if want := name != "so_peerpidfd" || hasPeerPidfd; f.OK != want {
			t.Errorf("%s found=%v on Linux %d.%d, want %v: %+v", name, f.OK, major, minor, want, f)
		}
		if f.Required != (name != "so_peerpidfd") {
			t.Errorf("%s required=%v", name, f.Required)
		}
	}
	if len(got) != 16 || rep.Verdict == "refused" {
		t.Errorf("features %+v, verdict %s, problems %v", rep.Features, rep.Verdict, rep.Problems)
	}
}

// TestCheckpointHelperHoldsNoHostPrivilege: the tar code of a checkpoint
// runs in the launcher's checkpoint helper, never as host root. While a
// 64 MiB upper layer is archived, the helper is seen with a host uid of the
// bed's uid pool (the domain's root), in a user and a network namespace
// other than the host's.
func TestCheckpointHelperHoldsNoHostPrivilege(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "head -c 67108864 /dev/zero > /workspace/big && echo ready && sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
	type seen struct{ uid, userns, netns string }
	var helpers []seen
	for try := 0; try < 5 && len(helpers) == 0; try++ {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				procs, _ := os.ReadDir("/proc")
				for _, p := range procs {
					dir := "/proc/" + p.Name()
					if cmd, _ := os.ReadFile(dir + "/cmdline"); string(cmd) != "autonomic-checkpoint\x00" {
						continue
					}
					status, _ := os.ReadFile(dir + "/status")
					var s seen
					var parent string
					for _, line := range strings.Split(string(status), "\n") {
						if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
							s.uid = strings.Join(strings.Fields(rest), " ")
						}
						if rest, ok := strings.CutPrefix(line, "PPid:"); ok {
							parent = strings.TrimSpace(rest)
						}
					}
					// Only this bed's: packages running beside this one
					// checkpoint their own domains with their own launchers.
					if exe, _ := os.Readlink("/proc/" + parent + "/exe"); exe != bed.Launcher {
						continue
					}
					s.userns, _ = os.Readlink(dir + "/ns/user")
					s.netns, _ = os.Readlink(dir + "/ns/net")
					if s.uid != "" && s.userns != "" {
						helpers = append(helpers, s)
					}
				}
			}
		}()
		_, err := d.Checkpoint(ctx, id)
		close(stop)
		<-done
		if err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
	}
	if len(helpers) == 0 {
		t.Fatal("five checkpoints of 64 MiB and the helper was never seen")
	}
	hostUser, _ := os.Readlink("/proc/self/ns/user")
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	for _, h := range helpers {
		ids := strings.Fields(h.uid) // real, effective, saved, filesystem
		for _, s := range ids {
			uid, err := strconv.ParseUint(s, 10, 32)
			if err != nil || uid < uint64(bed.UIDBase) || uid >= uint64(bed.UIDBase)+16*65536 {
				t.Fatalf("checkpoint helper runs as host uids %q, not the domain's", h.uid)
			}
		}
		if h.userns == hostUser || h.netns == hostNet {
			t.Fatalf("checkpoint helper shares the host's namespaces: %+v", h)
		}
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}

// helperSeen is one sighting of this bed's checkpoint helper in /proc.
type helperSeen struct {
	status, limits, cgroup string
	ns                     map[string]string
}

// watchHelpers records every checkpoint helper of this bed's launcher it
// sees in /proc while action runs.
func watchHelpers(t *testing.T, action func()) []helperSeen {
	t.Helper()
	var seen []helperSeen
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			procs, _ := os.ReadDir("/proc")
			for _, p := range procs {
				dir := "/proc/" + p.Name()
				if cmd, _ := os.ReadFile(dir + "/cmdline"); string(cmd) != "autonomic-checkpoint\x00" {
					continue
				}
				status, _ := os.ReadFile(dir + "/status")
				var parent string
				for _, line := range strings.Split(string(status), "\n") {
					if rest, ok := strings.CutPrefix(line, "PPid:"); ok {
						parent = strings.TrimSpace(rest)
					}
				}
				if exe, _ := os.Readlink("/proc/" + parent + "/exe"); exe != bed.Launcher {
					continue // another package's launcher
				}
				h := helperSeen{status: string(status), ns: map[string]string{}}
				limits, _ := os.ReadFile(dir + "/limits")
				cg, _ := os.ReadFile(dir + "/cgroup")
				h.limits, h.cgroup = string(limits), string(cg)
				gone := false
				for _, n := range []string{"user", "mnt", "pid", "ipc", "uts", "cgroup", "net"} {
					h.ns[n], _ = os.Readlink(dir + "/ns/" + n)
					gone = gone || h.ns[n] == ""
				}
				if gone {
					continue // it exited while we looked
				}
				// Seen once confined: the helper confines itself first
				// thing, the seccomp floor last.
				if strings.Contains(h.status, "Seccomp:\t2") && h.limits != "" {
					seen = append(seen, h)
				}
			}
		}
	}()
	action()
	close(stop)
	<-done
	return seen
}

// TestCheckpointHelperConfined: the checkpoint helper (archive and restore)
// runs in user, mount, pid, IPC, UTS, cgroup and network namespaces of its
// own; keeps only chown, dac_override, dac_read_search and fowner, in
// every set, bounding included; runs with no_new_privs under the seccomp
// floor; with limits of its own (a file size cap, no core dump), not its
// caller's; and a restore's helper is born in the domain's cgroup, so the
// pages it writes are the domain's.
func TestCheckpointHelperConfined(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "head -c 67108864 /dev/zero > /workspace/big && echo ready && sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
	var digest string
	var archiving []helperSeen
	for try := 0; try < 5 && len(archiving) == 0; try++ {
		archiving = watchHelpers(t, func() {
			cp, err := d.Checkpoint(ctx, id)
			if err != nil {
				t.Errorf("checkpoint: %v", err)
				return
			}
			digest = cp.SHA256
		})
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	restored := newID("rh")
	var restoring []helperSeen
	for try := 0; try < 5 && len(restoring) == 0; try++ {
		restoring = watchHelpers(t, func() {
			rr, err := d.Create(ctx, domain.Spec{ID: restored, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/true"}, Checkpoint: digest, OneShot: true})
			if err != nil {
				t.Errorf("restore: %v", err)
				return
			}
			_, _ = rr.Wait()
		})
	}
	if len(archiving) == 0 || len(restoring) == 0 {
		t.Fatalf("helper seen archiving %d times, restoring %d times in five tries each", len(archiving), len(restoring))
	}
	self := map[string]string{}
	for _, n := range []string{"user", "mnt", "pid", "ipc", "uts", "cgroup", "net"} {
		self[n], _ = os.Readlink("/proc/self/ns/" + n)
	}
	want := fmt.Sprintf("%016x", 1<<unix.CAP_CHOWN|1<<unix.CAP_DAC_OVERRIDE|1<<unix.CAP_DAC_READ_SEARCH|1<<unix.CAP_FOWNER)
	for i, h := range append(archiving, restoring...) {
		for n, host := range self {
			if h.ns[n] == "" || h.ns[n] == host {
				t.Errorf("helper %d shares the host's %s namespace (%q)", i, n, h.ns[n])
			}
		}
		for _, line := range []string{"CapInh:\t0000000000000000", "CapPrm:\t" + want, "CapEff:\t" + want, "CapBnd:\t" + want,
			"CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
			if !strings.Contains(h.status, line+"\n") {
				t.Errorf("helper %d: status lacks %q:\n%s", i, line, h.status)
			}
		}
		for _, line := range []string{"Max file size", "Max core file size", "Max cpu time"} {
			for _, l := range strings.Split(h.limits, "\n") {
				if strings.HasPrefix(l, line) && strings.Contains(l, "unlimited") {
					t.Errorf("helper %d: %s", i, l)
				}
			}
		}
	}
	for i, h := range restoring {
		if !strings.HasSuffix(strings.TrimSpace(h.cgroup), "/"+restored) && !strings.Contains(h.cgroup, "/"+restored+"\n") {
			t.Errorf("restore helper %d is not in the domain's cgroup: %q", i, h.cgroup)
		}
	}
	assertNoTrace(t, id)
	assertNoTrace(t, restored)
}
