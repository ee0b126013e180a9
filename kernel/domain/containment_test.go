package domain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// sharedRootLauncher starts a mount namespace whose / is rshared, as
// systemd makes the host's, and returns a backend whose launcher runs in
// it and that namespace's mount table reader. This host's / is private, so
// without it no test would see what a clone joining a peer group does.
func sharedRootLauncher(t *testing.T) (*domain.Linux, func() string) {
	t.Helper()
	holder := exec.Command("unshare", "-m", "--propagation", "shared", "sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	self, _ := os.Readlink("/proc/self/ns/mnt")
	pid := holder.Process.Pid
	waitFor(t, func() bool {
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		return ns != "" && ns != self
	})
	table := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		return ownMounts(string(b))
	}
	if !strings.Contains(strings.SplitN(table(), "\n", 2)[0], "shared:") {
		t.Fatalf("the namespace's / is not shared:\n%s", table())
	}
	wrapper := filepath.Join(t.TempDir(), "launcher")
	script := fmt.Sprintf("#!/bin/sh\nexec nsenter -t %d -m -- %s\n", pid, bed.Launcher)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &domain.Linux{LauncherPath: wrapper, Direct: true}, table
}

// TestSharedRootPropagation: under a shared / a domain is created and
// destroyed, a create that fails once every mount is made fails cleanly,
// and the launcher's mount table is exactly as before after each (the
// issue-11 finding: clones joined the host's peer group, pivot_root failed
// with EINVAL and 22 domain mounts stayed on the host until reboot).
func TestSharedRootPropagation(t *testing.T) {
	_, ctx := setup(t)
	d, table := sharedRootLauncher(t)
	ws, _ := workspace(t, map[string]string{"secret": "s\n"})
	before := table()
	same := func(when string) {
		t.Helper()
		if got := table(); got != before {
			t.Errorf("mount table changed %s: %d -> %d entries; new:\n%s\ngone:\n%s", when,
				strings.Count(before, "\n"), strings.Count(got, "\n"), newLines(before, got), newLines(got, before))
		}
	}

	id := newID("sh")
	r, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/sh", "-c", "cat /workspace/secret; sleep 600"}})
	if err != nil {
		same("after the create failed")
		t.Fatalf("create under a shared /: %v", err)
	}
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "s\n") })
	// The only change: the launcher's own bounded layers tmpfs and its upper,
	// under its 0700 state directory, until destroy.
	var layers []string
	for _, line := range strings.Split(table(), "\n") {
		if strings.Contains(line, "/domains/"+id+"/") {
			layers = append(layers, strings.Fields(line)[4])
		} else if line != "" && !strings.Contains(before, line+"\n") {
			t.Errorf("after create the launcher's namespace has a new mount: %s", line)
		}
	}
	want := filepath.Join(bed.State, "domains", id)
	if want = want + "/layers " + want + "/upper"; !limitEnforced(r.Started, "disk_bytes") {
		want = ""
	}
	if strings.Join(layers, " ") != want {
		t.Errorf("layer mounts after create: %v, want %s", layers, want)
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	same("after destroy")
	assertNoTrace(t, id)

	// Fails at the worker's exec, after the init made every mount.
	id = newID("sh")
	_, err = d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: []string{"/nonexistent"}, OneShot: true})
	if !errors.Is(err, protocol.E(protocol.CodeExecFailed)) {
		t.Fatalf("create with a missing program: %v, want exec_failed", err)
	}
	same("after a create that failed half-way")
	assertNoTrace(t, id)
}

func limitEnforced(st *protocol.Started, name string) bool {
	for _, l := range st.Limits {
		if l.Name == name {
			return l.Enforced
		}
	}
	return false
}

// ownMounts drops the mounts of other packages' testbeds from a mount
// table. The namespace copied them from the host when it was made, and when
// a test running beside this one removes its domain's directory the kernel
// detaches the copies here too (a mount point removed in another namespace
// is unmounted in all), which is not this launcher's doing.
func ownMounts(table string) string {
	foreign := filepath.Join(os.TempDir(), "autonomic-testbed-")
	var out strings.Builder
	for _, line := range strings.SplitAfter(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], foreign) && !strings.HasPrefix(f[4]+"/", bed.Dir+"/") {
			continue
		}
		out.WriteString(line)
	}
	return out.String()
}

// newLines lists the lines of after that are not in before.
func newLines(before, after string) string {
	var out []string
	for _, l := range strings.Split(after, "\n") {
		if l != "" && !strings.Contains(before, l+"\n") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// procStatus returns the named fields of /proc/<pid>/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// workerPID finds the domain's process running as the worker.
func workerPID(t *testing.T, id string, base uint32) int {
	t.Helper()
	var pid int
	waitFor(t, func() bool {
		for _, p := range cgroupPids(t, id) {
			if f := strings.Fields(procStatus(t, p)["Uid"]); len(f) > 0 && f[0] == strconv.Itoa(int(base)+1000) {
				pid = p
				return true
			}
		}
		return false
	})
	return pid
}

// TestDomainRootIsContained is the issue-11 audit finding "domain uid 0 ->
// host root": the init holds no capability and cannot gain one, the rootfs
// is owned by no domain identity, and the domain's uid 0 (the test enters a
// worker's user and mount namespaces as root) can neither make the rootfs
// writable, write it, plant a setuid file, nor unmount a mask.
func TestDomainRootIsContained(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "sleep 600")
	defer func() { _, _ = d.Destroy(ctx, id); _, _ = r.Wait() }()
	// Every thread of the init: capabilities are per thread.
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", r.Started.InitPID))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("init threads: %v", err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		st := procStatus(t, tid)
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if st[k] != "0000000000000000" {
				t.Errorf("init thread %d: %s = %s, want none", tid, k, st[k])
			}
		}
		if st["NoNewPrivs"] != "1" {
			t.Errorf("init thread %d: NoNewPrivs = %s", tid, st["NoNewPrivs"])
		}
	}
	pid := workerPID(t, id, r.Started.UIDBase)
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-U", "-m", "--", testbed.ProbePath, "domain-root").CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	for _, want := range []string{"remount-rw=EPERM", "setattr-rw=EPERM", "clone-rw=EPERM", "write-rootfs=EROFS", "setuid-rootfs=EROFS",
		"chmod-rootfs=EROFS", "umount-mask=EINVAL", "umount-procsys=EINVAL", "rootfs-owner=65534:65534"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("as the domain's uid 0: want %s\n%s", want, out)
		}
	}
	if _, err := os.Lstat(filepath.Join(bed.Rootfs, "etc", "autonomic-planted")); err == nil {
		t.Errorf("the domain's uid 0 wrote the shared rootfs")
	}
}

// launchWith runs a launcher with the given request, stdin and stderr and
// returns its first frame.
func launchWith(t *testing.T, path string, req map[string]any, stderr *os.File) *protocol.LauncherResponse {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Stdin = bytes.NewReader(jsonFrame(t, req))
	cmd.Stderr = stderr
	out, _ := cmd.Output()
	b, err := protocol.ReadFrame(bytes.NewReader(out), protocol.LauncherResponseMax, time.Time{})
	if err != nil {
		t.Fatalf("no frame: %v (%q)", err, out)
	}
	resp, err := protocol.DecodeLauncherResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestStderrMustBePipeOrNull: whatever the caller gives as stderr, the
// worker holds; a directory gave it the host's /. Only a pipe or /dev/null
// is accepted, anything else is refused before anything exists.
func TestStderrMustBePipeOrNull(t *testing.T) {
	_, _ = setup(t)
	ws, _ := workspace(t, nil)
	dir, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	file, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock := os.NewFile(uintptr(fds[0]), "sock")
	defer sock.Close()
	syscall.Close(fds[1])
	for name, f := range map[string]*os.File{"directory": dir, "regular file": file, "socket": sock} {
		t.Run(name, func(t *testing.T) {
			id := newID("se")
			r := launchWith(t, bed.Launcher, createReq(id, ws), f)
			if r.Type != protocol.TypeError || r.Error.Code != protocol.CodePathUnsafe {
				t.Fatalf("stderr a %s: got %s %+v, want path_unsafe", name, r.Type, r.Error)
			}
			assertNoTrace(t, id)
		})
	}
	null, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	id := newID("se")
	if r := launchWith(t, bed.Launcher, createReq(id, ws), null); r.Type != protocol.TypeStarted {
		t.Fatalf("stderr /dev/null: got %s %+v, want started", r.Type, r.Error)
	}
	assertNoTrace(t, id) // one-shot: destroyed when its worker exited
}

// TestBrokerSocketIsNobodys: the broker socket is bound read-only and owned
// by the domain's nobody, its group the worker's: the worker connects but
// cannot chmod or chown it (it could while the bind was idmapped to it).
func TestBrokerSocketIsNobodys(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	sockID := newID("sock")
	path := filepath.Join(bed.Sockets, sockID+".sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// As broker.Listen makes it.
	if err := os.Chmod(path, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, bed.OwnerUID, bed.OwnerGID); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			close(accepted)
		}
	}()
	s := "/run/autonomic/effect.sock"
	script := fmt.Sprintf(`stat -c 'OWNER=%%u:%%g %%a' %[1]s; chmod 0666 %[1]s 2>/dev/null && echo CHMOD=ok || echo CHMOD=refused
chown 1000:1000 %[1]s 2>/dev/null && echo CHOWN=ok || echo CHOWN=refused; %[2]s connect-effect`, s, testbed.ProbePath)
	r, err := d.Create(ctx, domain.Spec{ID: newID("d"), Generation: 1, WorkspaceID: ws, BrokerSocket: sockID, Argv: []string{"/bin/sh", "-c", script}, OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	out := string(r.Output())
	for _, want := range []string{"OWNER=65534:1000 660", "CHMOD=refused", "CHOWN=refused", "connect-effect=ok"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("worker output lacks %q\n%s", want, out)
		}
	}
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Error("the worker's connection never arrived")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("host socket mode changed: %v %v", fi.Mode(), err)
	}
}

// domainLimits is every resource limit a worker must see (soft, hard),
// whatever the caller's (protocol/README.md §5.2), with the bed's nproc
// and nofile.
var domainLimits = map[string][2]uint64{
	"Max cpu time": {inf, inf}, "Max file size": {inf, inf}, "Max data size": {inf, inf},
	"Max stack size": {8 << 20, inf}, "Max core file size": {0, 0}, "Max resident set": {inf, inf},
	"Max processes": {256, 256}, "Max open files": {1024, 1024}, "Max locked memory": {8 << 20, 8 << 20},
	"Max address space": {inf, inf}, "Max file locks": {1024, 1024}, "Max pending signals": {4096, 4096},
	"Max msgqueue size": {819200, 819200}, "Max nice priority": {0, 0}, "Max realtime priority": {0, 0}, "Max realtime timeout": {0, 0},
}

const inf = ^uint64(0)

// TestRlimitsAreTheDomains: a worker's rlimits are the launcher's table, not
// inherited from whoever ran the launcher, whether the caller's were higher
// (this test's nofile, sigpending, locks, core; a wrapper raising soft
// core and stack) or lower (the wrapper's nofile, fsize, sigpending,
// locks). Without CAP_SYS_RESOURCE (this host's root lacks it) the launcher
// cannot raise a hard limit, so a caller's lower one stays: stricter.
func TestRlimitsAreTheDomains(t *testing.T) {
	_, ctx := setup(t)
	ws, _ := workspace(t, nil)
	wrapper := filepath.Join(t.TempDir(), "launcher")
	lowered := map[string]uint64{"Max open files": 64, "Max file size": 65536, "Max pending signals": 16, "Max file locks": 8}
	script := "#!/bin/sh\nexec prlimit --nofile=64:64 --fsize=65536:65536 --sigpending=16:16 --locks=8:8 --core=unlimited:unlimited --stack=unlimited:unlimited -- " +
		bed.Launcher + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	capEff, _ := strconv.ParseUint(procStatus(t, os.Getpid())["CapEff"], 16, 64)
	canRaise := capEff&(1<<unix.CAP_SYS_RESOURCE) != 0
	cases := []struct {
		name   string
		d      *domain.Linux
		caller map[string]uint64
	}{{"as is", bed.Domains(), nil}, {"caller's limits changed", &domain.Linux{LauncherPath: wrapper, Direct: true}, lowered}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := c.d.Create(ctx, domain.Spec{ID: newID("rl"), Generation: 1, WorkspaceID: ws, Argv: []string{"/usr/bin/cat", "/proc/self/limits"}, OneShot: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Wait(); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, line := range strings.Split(string(r.Output()), "\n") {
				if len(line) > 26 && strings.HasPrefix(line, "Max ") {
					f := strings.Fields(line[26:])
					got[strings.TrimSpace(line[:26])] = f[0] + " " + f[1]
				}
			}
			if len(got) != len(domainLimits) {
				t.Errorf("worker reports %d limits, the table has %d:\n%s", len(got), len(domainLimits), r.Output())
			}
			show := func(v uint64) string {
				if v == inf {
					return "unlimited"
				}
				return strconv.FormatUint(v, 10)
			}
			for k, v := range domainLimits {
				if hard, ok := c.caller[k]; ok && !canRaise {
					v[1] = min(v[1], hard)
					v[0] = min(v[0], v[1])
				}
				if want := show(v[0]) + " " + show(v[1]); got[k] != want {
					t.Errorf("%s = %q, want %q", k, got[k], want)
				}
			}
		})
	}
}

// TestStdinLeftBlocking: the launcher makes its stdin non-blocking to read
// with a deadline; the flag lives on the caller's open file, so it must be
// restored before the launcher exits.
func TestStdinLeftBlocking(t *testing.T) {
	_, _ = setup(t)
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	rd, wr := os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	defer rd.Close()
	cmd := exec.Command(bed.Launcher)
	cmd.Stdin = rd
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_, _ = wr.Write(jsonFrame(t, map[string]any{"protocol": 1, "action": "preflight", "request_id": "r"}))
	wr.Close()
	_ = cmd.Wait()
	fl, err := unix.FcntlInt(uintptr(p[0]), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fl&unix.O_NONBLOCK != 0 {
		t.Error("the launcher left its caller's stdin O_NONBLOCK")
	}
}

// TestDiskIsBounded: a worker filling /tmp or /workspace gets ENOSPC inside
// its domain, what it wrote is on the domain's own tmpfs, not the host's
// disk, and destroy leaves the host's mount table as it was.
func TestDiskIsBounded(t *testing.T) {
	d, ctx := setup(t)
	orig, err := os.ReadFile(bed.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(bed.ConfigPath, orig, 0o644) })
	var cfg map[string]any
	if err := json.Unmarshal(orig, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["tmp_bytes"], cfg["disk_bytes"] = 4<<20, 8<<20
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(bed.ConfigPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ws, _ := workspace(t, nil)
	mounts := mountCount(t)
	id, r := startDomain(t, d, ctx, ws, `head -c 16777216 /dev/zero > /tmp/fill; echo TMP=$?; head -c 16777216 /dev/zero > /workspace/fill; echo WS=$?
stat -c 'SIZES %s' /tmp/fill /workspace/fill; echo DONE; sleep 600`)
	defer func() { _, _ = d.Destroy(ctx, id); _, _ = r.Wait() }()
	var disk *protocol.Limit
	for i, l := range r.Started.Limits {
		if l.Name == "disk_bytes" {
			disk = &r.Started.Limits[i]
		}
	}
	// tmpfs holds overlay's user.* xattrs from Linux 6.6; before, the
	// launcher must say the upper layer is not bounded.
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &major, &minor)
	bounded := major > 6 || major == 6 && minor >= 6
	if disk == nil || disk.Enforced != bounded || disk.Value != 8<<20 {
		t.Fatalf("started frame's disk_bytes on Linux %d.%d: %+v", major, minor, disk)
	}
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "DONE") })
	out := string(r.Output())
	if !strings.Contains(out, "TMP=1\n") || bounded && (strings.Count(out, "No space left on device") != 2 || !strings.Contains(out, "WS=1\n")) {
		t.Errorf("filling /tmp and /workspace did not end in ENOSPC:\n%s", out)
	}
	if !bounded {
		return
	}
	var sizes []int
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "SIZES "); ok {
			n, _ := strconv.Atoi(v)
			sizes = append(sizes, n)
		}
	}
	if len(sizes) != 2 || sizes[0] > 4<<20 || sizes[1] > 8<<20 {
		t.Errorf("file sizes beyond the bounds: %v", sizes)
	}
	var fs, state unix.Statfs_t
	upper := filepath.Join(bed.State, "domains", id, "upper")
	if err := unix.Statfs(filepath.Join(upper, "fill"), &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
		t.Errorf("the upper layer is not on a tmpfs: type %#x, %v", fs.Type, err)
	}
	if err := unix.Statfs(bed.State, &state); err == nil && fs.Type == state.Type && fs.Fsid == state.Fsid {
		t.Errorf("the upper layer is on the host's state disk")
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	if got := mountCount(t); got != mounts {
		t.Errorf("host mount table: %d entries before create, %d after destroy", mounts, got)
	}
	assertNoTrace(t, id)
}

// TestInitHoldsNoHostDescriptors: the domain's PID 1 holds no descriptor of
// a host file. Before the fix the Go runtime's cgroup-aware GOMAXPROCS
// opened the host's cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us before
// pivot_root and kept them. Listed from the host, each of the init's
// descriptors must be a pipe, a socket, an anonymous inode or /dev/null.
// (The launcher also marks whatever its caller left open close-on-exec, so
// nothing of the caller's reaches the init.)
func TestInitHoldsNoHostDescriptors(t *testing.T) {
	_, ctx := setup(t)
	// The caller leaves a host file open (not close-on-exec) on fd 7.
	wrapper := filepath.Join(bed.Dir, "bin", "leaky-"+newID("l"))
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec 7<"+bed.ConfigPath+"\nexec "+bed.Launcher+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := &domain.Linux{LauncherPath: wrapper, Direct: true}
	ws, _ := workspace(t, nil)
	id, r := startDomain(t, d, ctx, ws, "echo ready; sleep 600")
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "ready") })
	dir := fmt.Sprintf("/proc/%d/fd", r.Started.InitPID)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("init's descriptors: %v (%d)", err, len(entries))
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatalf("fd %s: %v", e.Name(), err)
		}
		ok := false
		for _, p := range []string{"pipe:[", "socket:[", "anon_inode:"} {
			ok = ok || strings.HasPrefix(target, p)
		}
		var st, null syscall.Stat_t
		if !ok && syscall.Stat(filepath.Join(dir, e.Name()), &st) == nil && syscall.Stat("/dev/null", &null) == nil {
			ok = st.Mode&syscall.S_IFMT == syscall.S_IFCHR && st.Rdev == null.Rdev
		}
		t.Logf("init fd %s -> %s", e.Name(), target)
		if !ok {
			t.Errorf("init holds fd %s -> %s", e.Name(), target)
		}
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}
