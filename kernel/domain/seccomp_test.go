package domain_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/seccomp"
)

func compileShipped(t *testing.T, name string) []byte {
	t.Helper()
	p, err := seccomp.Shipped(name)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := seccomp.Compile(p, seccomp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return prog.Bytes()
}

func compileJSON(t *testing.T, js string) []byte {
	t.Helper()
	p, err := seccomp.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := seccomp.Compile(p, seccomp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return prog.Bytes()
}

// runFiltered runs argv in a one-shot domain under program (plus the floor,
// which the launcher always adds) and returns output, exit and violations.
func runFiltered(t *testing.T, program []byte, argv ...string) (string, *protocol.Exited, []protocol.Violation) {
	t.Helper()
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	r, err := d.Create(ctx, domain.Spec{ID: newID("sc"), Generation: 1, WorkspaceID: ws, Argv: argv, Seccomp: program, OneShot: true})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if program != nil && (r.Started.Seccomp != "filtered" || !r.Started.Notify) {
		t.Fatalf("started: seccomp=%q notify=%v", r.Started.Seccomp, r.Started.Notify)
	}
	ex, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return string(r.Output()), ex, r.Violations()
}

func socketViolations(vs []protocol.Violation) (n uint64, families []uint64) {
	for _, v := range vs {
		if v.Syscall == "socket" && v.Nr == 41 {
			n += v.Count
			families = append(families, v.Args[0])
		}
	}
	return n, families
}

// TestInetSocketIsRefusedAndRecorded: under worker.json, AF_INET and
// AF_INET6 sockets get EPERM and exactly one violation frame each, bash's
// /dev/tcp too, and AF_UNIX works.
func TestInetSocketIsRefusedAndRecorded(t *testing.T) {
	worker := compileShipped(t, "worker")
	out, ex, vs := runFiltered(t, worker, testbed.ProbePath, "socket-inet", "socket-inet6", "socket-unix")
	for _, want := range []string{"socket-inet=EPERM", "socket-inet6=EPERM", "socket-unix=ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("probe output lacks %q:\n%s", want, out)
		}
	}
	if ex.ExitCode == nil || *ex.ExitCode != 0 {
		t.Errorf("probe exit: %+v", ex)
	}
	n, fams := socketViolations(vs)
	if n != 2 || len(fams) != 2 || fams[0] != 2 || fams[1] != 10 {
		t.Fatalf("violations = %+v, want exactly AF_INET then AF_INET6", vs)
	}
	for _, v := range vs {
		if v.PID <= 1 || v.MonotonicNs == 0 {
			t.Errorf("violation lacks domain pid or timestamp: %+v", v)
		}
	}

	out, _, vs = runFiltered(t, worker, "/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/80 && echo CONNECTED || echo REFUSED")
	if !strings.Contains(out, "REFUSED") {
		t.Errorf("bash /dev/tcp: %s", out)
	}
	if n, _ := socketViolations(vs); n != 1 {
		t.Errorf("bash /dev/tcp produced %d violations, want 1: %+v", n, vs)
	}
}

// TestSigsysHandlerHidesNothing: a worker that catches SIGSYS still gets
// EPERM and still leaves its violation, because notification is not a signal.
func TestSigsysHandlerHidesNothing(t *testing.T) {
	out, _, vs := runFiltered(t, compileShipped(t, "worker"), testbed.ProbePath, "sigsys-inet")
	if !strings.Contains(out, "sigsys-inet=EPERM") {
		t.Errorf("probe: %s", out)
	}
	if n, _ := socketViolations(vs); n != 1 {
		t.Errorf("violations %+v, want 1", vs)
	}
}

// allowAll is the widest profile there is; the floor must still hold.
const allowAll = `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],"syscalls":[]}`

func TestFloorCannotBeWidened(t *testing.T) {
	for name, prog := range map[string][]byte{"allow-all": compileJSON(t, allowAll), "worker": compileShipped(t, "worker"), "none": nil} {
		t.Run(name, func(t *testing.T) {
			out, _, _ := runFiltered(t, prog, testbed.ProbePath, "floor", "clone-newuser", "fork", "tiocsti")
			lines := 0
			for _, line := range strings.Split(out, "\n") {
				if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "floor:") {
					lines++
					if v != "EPERM" {
						t.Errorf("%s answered %s, want EPERM", k, v)
					}
				}
			}
			if lines < 38 {
				t.Errorf("only %d floor syscalls probed:\n%s", lines, out)
			}
			for _, want := range []string{"unshare-newuser=EPERM", "clone-newuser=EPERM", "fork=ok", "tiocsti=EPERM"} {
				if !strings.Contains(out, want) {
					t.Errorf("probe output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestX32SyscallKillsWorker(t *testing.T) {
	out, ex, _ := runFiltered(t, compileJSON(t, allowAll), testbed.ProbePath, "x32")
	if !strings.Contains(out, "x32=calling") || strings.Contains(out, "x32=ok") || strings.Contains(out, "x32=E") {
		t.Errorf("probe output: %s", out)
	}
	if ex.Signal != "SIGSYS" {
		t.Errorf("exited = %+v, want killed by SIGSYS", ex)
	}
}

// TestViolationFloodIsCoalesced: a flood costs the monitor bounded frames,
// yet every attempt is counted.
func TestViolationFloodIsCoalesced(t *testing.T) {
	out, _, vs := runFiltered(t, compileShipped(t, "worker"), testbed.ProbePath, "socket-flood")
	if !strings.Contains(out, "socket-flood=1000") {
		t.Fatalf("probe: %s", out)
	}
	n, _ := socketViolations(vs)
	if n != 1000 {
		t.Errorf("violations count %d attempts, want 1000", n)
	}
	if len(vs) > 200 {
		t.Errorf("%d violation frames for one flood: not coalesced", len(vs))
	}
	t.Logf("1000 attempts reported in %d frames", len(vs))
}

// TestFloorConfinesFamiliesPersonaAndNewerCalls: with no profile (and under
// the widest one), a worker gets AF_UNIX, AF_INET and AF_INET6 sockets and
// nothing else (AF_VSOCK is not network-namespaced; AF_NETLINK, AF_PACKET
// reach host subsystems), only the personality query, and ENOSYS for every
// syscall above the floor's reviewed range (open_tree_attr is 467).
func TestFloorConfinesFamiliesPersonaAndNewerCalls(t *testing.T) {
	want := map[string]string{
		"family:unix": "ok", "family:inet": "ok", "family:inet6": "ok", "socketpair-netlink": "EAFNOSUPPORT",
		"personality-query": "ok", "personality-norandom": "EPERM", "personality-linux": "EPERM",
		"newer:467": "ENOSYS", "newer:468": "ENOSYS", "newer:469": "ENOSYS", "newer:470": "ENOSYS", "newer:511": "ENOSYS",
	}
	for _, fam := range []string{"unspec", "ax25", "ipx", "appletalk", "x25", "key", "netlink", "packet", "alg", "vsock", "xdp", "unix-highbits", "vsock-highbits"} {
		want["family:"+fam] = "EAFNOSUPPORT"
	}
	for name, prog := range map[string][]byte{"none": nil, "allow-all": compileJSON(t, allowAll)} {
		t.Run(name, func(t *testing.T) {
			out, _, _ := runFiltered(t, prog, testbed.ProbePath, "families", "personality", "newer")
			got := map[string]string{}
			for _, line := range strings.Split(out, "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					got[k] = v
				}
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q, want %s", k, got[k], v)
				}
			}
		})
	}
}

// TestExecFailureIsNotStarted: started means the worker's execve happened.
// A profile that kills the process at execve (the stage dies before the
// worker exists) or refuses it is an exec_failed create, never started
// followed by exited SIGSYS; and the failed create leaves nothing.
func TestExecFailureIsNotStarted(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	for name, action := range map[string]string{"kill": "SCMP_ACT_KILL_PROCESS", "errno": "SCMP_ACT_ERRNO"} {
		t.Run(name, func(t *testing.T) {
			prog := compileJSON(t, `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["execve","execveat"],"action":"`+action+`"}]}`)
			id := newID("ex")
			r, err := d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: ws, Argv: []string{"/bin/true"}, Seccomp: prog, OneShot: true})
			if err == nil {
				ex, _ := r.Wait()
				t.Fatalf("a worker whose execve was %s got started (%+v), then exited %+v", name, r.Started, ex)
			}
			if !errors.Is(err, protocol.E(protocol.CodeExecFailed)) {
				t.Fatalf("create: %v, want exec_failed", err)
			}
			assertNoTrace(t, id)
		})
	}
	// The same profile with execve allowed starts and exits 0.
	out, ex, _ := runFiltered(t, compileJSON(t, allowAll), "/bin/true")
	if ex.ExitCode == nil || *ex.ExitCode != 0 {
		t.Fatalf("allowed exec: %+v %s", ex, out)
	}
}
