package domain_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
	rootfs "github.com/autonomic-kernel/autonomic/rootfs-builder"
)

// hostSocket serves HTTP on <sockets root>/<id>.sock, made as broker.Listen
// makes a socket (owned by the kernel's account, mode 0660); every request
// is answered with name and its path.
func hostSocket(t *testing.T, id, name string) string {
	t.Helper()
	path := filepath.Join(bed.Sockets, id+".sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(path, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, bed.OwnerUID, bed.OwnerGID); err != nil {
		t.Fatal(err)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s", name, r.Method, r.URL.Path)
	}))
	return path
}

// mountLine returns the worker's mountinfo line of the mount at p.
func mountLine(mountinfo, p string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == p {
			return line
		}
	}
	return ""
}

// TestRelaySocketIsBoundLikeTheBrokers: relay_socket is bound at
// /run/autonomic/inference.sock and egress_socket at egress.sock exactly
// as the broker socket is at effect.sock (read-only, noexec, the domain's nobody's, group the
// worker's), each reaching its own host server; the worker's HOME is
// /tmp/home, its own (0700), writable, and not under /workspace.
func TestRelaySocketIsBoundLikeTheBrokers(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	brokerID, relayID := newID("sock"), newID("relay")
	hostSocket(t, brokerID, "broker")
	relayPath := hostSocket(t, relayID, "relay")
	egressID := newID("egress")
	hostSocket(t, egressID, "egress")
	s := "/run/autonomic/inference.sock"
	script := fmt.Sprintf(`stat -c 'OWNER=%%u:%%g %%a' %[1]s; chmod 0666 %[1]s 2>/dev/null && echo CHMOD=ok || echo CHMOD=refused
stat -c 'EGRESS=%%u:%%g %%a' /run/autonomic/egress.sock
%[2]s http unix:%[1]s http unix:/run/autonomic/effect.sock http unix:/run/autonomic/egress.sock
echo "HOME=$HOME"; stat -c 'HOMEDIR=%%u:%%g %%a' "$HOME"; echo x > "$HOME/.agentrc" && echo HOMEWRITE=ok
echo "WORKSPACE=$(ls -A /workspace)"; cat /proc/self/mountinfo`, s, testbed.ProbePath)
	r, err := d.Create(ctx, domain.Spec{ID: newID("d"), Generation: 1, WorkspaceID: ws, BrokerSocket: brokerID, RelaySocket: relayID,
		EgressSocket: egressID, Argv: []string{"/bin/sh", "-c", script}, OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	out := string(r.Output())
	for _, want := range []string{"OWNER=65534:1000 660", "CHMOD=refused", "http=200 relay GET /probe", "http=200 broker GET /probe",
		"EGRESS=65534:1000 660", "http=200 egress GET /probe", "HOME=/tmp/home", "HOMEDIR=1000:1000 700", "HOMEWRITE=ok", "WORKSPACE="} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("worker output lacks %q\n%s", want, out)
		}
	}
	for _, p := range []string{s, "/run/autonomic/effect.sock", "/run/autonomic/egress.sock"} {
		line := mountLine(out, p)
		if !strings.Contains(line, " ro,") || !strings.Contains(line, "noexec") || !strings.Contains(line, "nosuid") {
			t.Errorf("%s is not mounted read-only, nosuid and noexec: %q", p, line)
		}
	}
	if fi, err := os.Stat(relayPath); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("host relay socket mode changed: %v %v", fi.Mode(), err)
	}
}

// TestNamedRootfs: a create naming a rootfs of the launcher's rootfses
// table runs on that tree, identified by its own manifest digest; an
// unknown name is not_found; a named tree that differs from its manifest
// is refused exactly as the default one would be; each rootfs keeps its own
// verification record, so alternating between them re-verifies neither.
func TestNamedRootfs(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	name, tampered := newID("rootfs"), newID("rootfs")
	marker := filepath.Join(t.TempDir(), "name")
	if err := os.WriteFile(marker, []byte(name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	add := []rootfs.Add{{Src: marker, Dest: "/etc/autonomic-rootfs-name"}}
	_, digest, err := bed.AddRootfs(ctx, name, add)
	if err != nil {
		t.Fatal(err)
	}
	tamperedPath, _, err := bed.AddRootfs(ctx, tampered, add)
	if err != nil {
		t.Fatal(err)
	}
	start := func(fs string) (*domain.Running, error) {
		return d.Create(ctx, domain.Spec{ID: newID("d"), Generation: 1, WorkspaceID: ws, Rootfs: fs,
			Argv: []string{"/bin/sh", "-c", "cat /etc/autonomic-rootfs-name 2>/dev/null || echo default"}, OneShot: true})
	}
	for _, c := range []struct{ rootfs, digest, out string }{{name, digest, name}, {"", bed.RootfsDigest, "default"}, {name, digest, name}} {
		r, err := start(c.rootfs)
		if err != nil {
			t.Fatalf("create on %q: %v", c.rootfs, err)
		}
		if _, err := r.Wait(); err != nil {
			t.Fatal(err)
		}
		if r.Started.RootfsDigest != c.digest || strings.TrimSpace(string(r.Output())) != c.out {
			t.Errorf("rootfs %q: started on %s, worker saw %q; want %s and %q", c.rootfs, r.Started.RootfsDigest, r.Output(), c.digest, c.out)
		}
	}
	for _, rec := range []string{"rootfs-verified.json", "rootfs-verified-" + name + ".json"} {
		if _, err := os.Stat(filepath.Join(bed.State, rec)); err != nil {
			t.Errorf("verification record %s: %v", rec, err)
		}
	}
	if _, err := start("no-such-rootfs"); !errors.Is(err, protocol.E(protocol.CodeNotFound)) {
		t.Errorf("unknown rootfs name: %v, want not_found", err)
	}
	if _, err := start("../rootfs"); !errors.Is(err, protocol.E(protocol.CodeInvalidField)) {
		t.Errorf("path as a rootfs name: %v, want invalid_field", err)
	}
	// Same size, other content: only the full check of the tree sees it.
	if err := os.WriteFile(filepath.Join(tamperedPath, "etc/autonomic-rootfs-name"), []byte(strings.ToUpper(name)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := start(tampered); !errors.Is(err, protocol.E(protocol.CodeRootfsMismatch)) {
		t.Errorf("tampered named rootfs: %v, want rootfs_mismatch", err)
	}
	// A configured path that no longer exists (a cleared rootfs cache):
	// create says so, with the fix, and so does preflight beforehand.
	gone := newID("rootfs")
	if err := bed.NameRootfs(gone, filepath.Join(t.TempDir(), "cleared"), digest); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bed.NameRootfs(gone, filepath.Join(bed.Dir, "rootfs-"+name), digest) })
	if _, err := start(gone); !errors.Is(err, protocol.E(protocol.CodeRootfsMissing)) || !strings.Contains(err.Error(), "make install") {
		t.Errorf("named rootfs at a missing path: %v, want rootfs_missing", err)
	}
	rep, err := d.Preflight(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := "rootfs " + strconv.Quote(gone) + " is missing"; !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.HasPrefix(p, want) }) || rep.Verdict == "ok" {
		t.Errorf("preflight with %s missing: verdict %s, problems %q", gone, rep.Verdict, rep.Problems)
	}
}

// hostListeners listens on the host's loopback (TCP and UDP), on an
// abstract Unix socket and on a path Unix socket anyone may connect to, and
// counts what reaches each.
type hostListeners struct {
	tcp, udp, abstract, path string
	hits                     atomic.Int64
}

func listenOnHost(t *testing.T) *hostListeners {
	t.Helper()
	h := &hostListeners{abstract: newID("autonomic-test-abstract"), path: filepath.Join(t.TempDir(), "host.sock")}
	for _, a := range [][2]string{{"tcp", "127.0.0.1:0"}, {"unix", "@" + h.abstract}, {"unix", h.path}} {
		ln, err := net.Listen(a[0], a[1])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		if a[0] == "tcp" {
			h.tcp = ln.Addr().String()
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				h.hits.Add(1)
				c.Close()
			}
		}()
	}
	if err := os.Chmod(h.path, 0o777); err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	h.udp = pc.LocalAddr().String()
	go func() {
		b := make([]byte, 64)
		for {
			if _, _, err := pc.ReadFrom(b); err != nil {
				return
			}
			h.hits.Add(1)
		}
	}()
	return h
}

// TestAgentProfileReachesOnlyLoopback: under the agent profile a worker
// has AF_INET and AF_INET6 sockets and its own loopback (connect, addressed
// sendto and sendmmsg, send and sendmsg without an address); a connect,
// sendto, sendmsg or sendmmsg to anything else, or naming an address the
// monitor cannot read, fails with EPERM and leaves one violation frame
// naming the call and its destination; nothing reaches the host's
// loopback listeners or its Unix sockets, abstract or path.
func TestAgentProfileReachesOnlyLoopback(t *testing.T) {
	h := listenOnHost(t)
	_, tcpPort, _ := net.SplitHostPort(h.tcp)
	out, ex, vs := runFiltered(t, compileShipped(t, "agent"), testbed.ProbePath, "loopback",
		"connect-tcp", h.tcp, "connect-tcp", "[::1]:"+tcpPort, "udp-sendto", h.udp, "connect-abstract", h.abstract, "connect-unix", h.path,
		"connect-tcp", "10.0.0.1:80", "connect-tcp", "1.1.1.1:443", "connect-tcp", "[2606:4700:4700::1111]:443",
		"udp-sendto", "1.1.1.1:53", "udp-sendmsg", "8.8.8.8:53", "udp-sendmmsg", "127.0.0.2:9", "udp-sendmmsg", "9.9.9.9:53", "connect-badptr")
	for _, want := range []string{"loopback:tcp4=ok", "loopback:tcp6=ok", "loopback:udp4=ok", "loopback:udp6=ok",
		"connect-tcp:" + h.tcp + "=ECONNREFUSED", "connect-tcp:[::1]:" + tcpPort + "=ECONNREFUSED", "udp-sendto:" + h.udp + "=ok",
		"connect-abstract:" + h.abstract + "=ECONNREFUSED", "connect-unix:" + h.path + "=ENOENT",
		"connect-tcp:10.0.0.1:80=EPERM", "connect-tcp:1.1.1.1:443=EPERM", "connect-tcp:[2606:4700:4700::1111]:443=EPERM",
		"udp-sendto:1.1.1.1:53=EPERM", "udp-sendmsg:8.8.8.8:53=EPERM", "udp-sendmmsg:127.0.0.2:9=ok", "udp-sendmmsg:9.9.9.9:53=EPERM",
		"connect-badptr=EPERM"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("probe output lacks %q:\n%s", want, out)
		}
	}
	if ex.ExitCode == nil || *ex.ExitCode != 0 {
		t.Errorf("probe exit: %+v", ex)
	}
	var got []string
	for _, v := range vs {
		got = append(got, fmt.Sprintf("%s %s x%d", v.Syscall, v.Destination, v.Count))
		if v.PID <= 1 || v.MonotonicNs == 0 {
			t.Errorf("violation lacks domain pid or timestamp: %+v", v)
		}
	}
	want := []string{"connect 10.0.0.1:80 x1", "connect 1.1.1.1:443 x1", "connect [2606:4700:4700::1111]:443 x1", "sendto 1.1.1.1:53 x1", "sendmsg 8.8.8.8:53 x1",
		"sendmmsg 9.9.9.9:53 x1", "connect unreadable x1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	time.Sleep(200 * time.Millisecond) // a datagram in flight would land by now
	if n := h.hits.Load(); n != 0 {
		t.Errorf("the host's listeners saw %d connections or datagrams from the domain", n)
	}
}

// TestEntryBridgesToTheRelay is an agent domain as issue 13 builds it: a
// rootfs with autonomic-entry, the relay socket bound in, the agent
// profile. The agent (here the probe) speaks HTTP to 127.0.0.1:8787 and
// reaches the host's relay server through the bridge; its config file is in
// HOME; nothing is a violation; the host's listeners see nothing.
func TestEntryBridgesToTheRelay(t *testing.T) {
	d, ctx := setup(t)
	h := listenOnHost(t)
	entry, err := bed.Static(ctx, "./entry/cmd/autonomic-entry")
	if err != nil {
		t.Fatal(err)
	}
	name := newID("agents")
	if _, _, err := bed.AddRootfs(ctx, name, []rootfs.Add{{Src: entry, Dest: "/usr/local/bin/autonomic-entry"}}); err != nil {
		t.Fatal(err)
	}
	ws, _ := workspace(t, nil)
	relayID := newID("relay")
	hostSocket(t, relayID, "relay")
	script := fmt.Sprintf(`%[1]s http http://127.0.0.1:8787/v1/responses connect-tcp %[2]s connect-tcp 1.1.1.1:443
cat "$HOME/.codex/config.toml"; echo "MODEL=$MODEL"; exit 5`, testbed.ProbePath, h.tcp)
	r, err := d.Create(ctx, domain.Spec{ID: newID("d"), Generation: 1, WorkspaceID: ws, RelaySocket: relayID, Rootfs: name,
		Seccomp: compileShipped(t, "agent"), OneShot: true,
		Argv: []string{"autonomic-entry", "--home-file", ".codex/config.toml=" + base64.StdEncoding.EncodeToString([]byte("wire_api = \"responses\"\n")),
			"--env", "MODEL=gpt-5.5", "--bridge", "127.0.0.1:8787=/run/autonomic/inference.sock", "--", "/bin/sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	out := string(r.Output())
	for _, want := range []string{"http=200 relay GET /v1/responses", "connect-tcp:" + h.tcp + "=ECONNREFUSED", "connect-tcp:1.1.1.1:443=EPERM",
		`wire_api = "responses"`, "MODEL=gpt-5.5"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if ex.ExitCode == nil || *ex.ExitCode != 5 {
		t.Errorf("exit %+v, want ARGV's 5", ex)
	}
	vs := r.Violations()
	if len(vs) != 1 || vs[0].Syscall != "connect" || vs[0].Destination != "1.1.1.1:443" {
		t.Errorf("violations %+v, want the one connect to 1.1.1.1:443", vs)
	}
	time.Sleep(200 * time.Millisecond)
	if n := h.hits.Load(); n != 0 {
		t.Errorf("the host's listeners saw %d connections from the domain", n)
	}
}

// cpuOfPid is a process's user and system CPU time, from /proc/<pid>/stat.
func cpuOfPid(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	u, _ := strconv.ParseInt(f[11], 10, 64) // utime, the 14th field
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / 100 // USER_HZ
}

// TestSendmmsgCostBounded: under the agent profile every sendmmsg is
// notified; a worker calling it in a loop (64 loopback datagrams a call)
// makes the domain's own notifier, in the domain's cgroup and without host
// root, do the answering: the root monitor's CPU does not grow with the
// loop, and the notifier's stays under twice the worker's (one vectored
// read of every name a call, a rate bound past which the worker waits).
// Before, the monitor (host root, the kernel's cgroup) spent 3,650 ms of
// CPU for the domain's 151.
func TestSendmmsgCostBounded(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	id := newID("mm")
	r, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Seccomp: compileShipped(t, "agent"),
		Argv: []string{"/bin/sh", "-c", testbed.ProbePath + " sendmmsg-loop 3000 && sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = d.Destroy(context.Background(), id) })
	if !r.Started.Notify {
		t.Skip("no seccomp user notification on this host")
	}
	initPID := r.Started.InitPID
	st := procStatus(t, initPID)
	monitor, _ := strconv.Atoi(st["PPid"])
	notifier := 0
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", initPID, initPID))
	for _, c := range strings.Fields(string(children)) {
		pid, _ := strconv.Atoi(c)
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); string(cmd) == "autonomic-notify\x00" {
			notifier = pid
		}
	}
	if notifier == 0 {
		t.Fatal("no notifier among the init's children")
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", notifier))
	if !strings.Contains(string(cg), "0::/") || !strings.Contains(string(cg)+"\n", "/"+id+"\n") {
		t.Fatalf("the notifier is not in the domain's cgroup: %q", cg)
	}
	// The notifier confines itself as it starts: read its credentials
	// once it has (bounded), then hold it to them.
	confined := func(ns map[string]string) bool {
		return ns["Uid"] != "0\t0\t0\t0" && ns["CapEff"] == fmt.Sprintf("%016x", 1<<unix.CAP_SYS_PTRACE) && ns["NoNewPrivs"] == "1"
	}
	ns := procStatus(t, notifier)
	for end := time.Now().Add(10 * time.Second); !confined(ns) && time.Now().Before(end); ns = procStatus(t, notifier) {
		time.Sleep(10 * time.Millisecond)
	}
	if !confined(ns) {
		t.Fatalf("notifier credentials: uid %q, CapEff %q, NoNewPrivs %q", ns["Uid"], ns["CapEff"], ns["NoNewPrivs"])
	}
	waitFor(t, func() bool { return strings.Contains(string(r.Output()), "sendmmsg-loop=") })
	out := string(r.Output())
	var calls, failed, workerUs int64
	if _, err := fmt.Sscanf(out[strings.Index(out, "sendmmsg-loop="):], "sendmmsg-loop=%d failed=%d cpu_us=%d", &calls, &failed, &workerUs); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	worker := time.Duration(workerUs) * time.Microsecond
	mon, note := cpuOfPid(t, monitor), cpuOfPid(t, notifier)
	t.Logf("%d sendmmsg calls (%d failed): worker %v, notifier %v (domain's cgroup), root monitor %v (its whole life)", calls, failed, worker, note, mon)
	if calls < 1000 || failed != 0 {
		t.Fatalf("%d calls, %d failed: the loop exercised nothing", calls, failed)
	}
	if note > 2*worker {
		t.Errorf("the notifier spent %v for the worker's %v: more than twice", note, worker)
	}
	if mon > worker/4 || mon > 300*time.Millisecond {
		t.Errorf("the root monitor spent %v while the worker's loop took %v: it still does the answering", mon, worker)
	}
	if _, err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Wait()
	assertNoTrace(t, id)
}
