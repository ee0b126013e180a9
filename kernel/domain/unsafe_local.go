package domain

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// UnsafeLocal runs the worker as a plain child process of the kernel, for
// development on a machine without root. It ISOLATES NOTHING: no
// namespaces, no cgroup, no seccomp, no overlay; the worker runs as the
// kernel's own user in WorkspacesRoot/<workspace_id>, with the kernel's
// access to the host. Never use it for untrusted code. It cannot
// checkpoint, so an episode on it can never be repaired, only contained.
//
// With no mount namespace there is nothing to bind the broker socket
// into: the worker is told where things are in its environment instead
// (EnvWorkspace, and EnvBrokerSocket, EnvRelaySocket and EnvEgressSocket
// when the spec names those sockets). It has no rootfs either: Spec.Rootfs is ignored,
// the worker sees the host's own tree.
type UnsafeLocal struct {
	WorkspacesRoot string
	// SocketsRoot mirrors broker_sockets_root: a spec's BrokerSocket id
	// names SocketsRoot/<id>.sock, as it does for the launcher.
	SocketsRoot string
	Log         hclog.Logger

	mu    sync.Mutex
	procs map[string]localProc
}

// localProc is one running worker: done closes once it is reaped.
type localProc struct {
	cmd  *exec.Cmd
	done <-chan struct{}
}

var _ ExecutionDomain = (*UnsafeLocal)(nil)

const unsafeIsolation = "none"

// The environment an UnsafeLocal worker finds its workspace and broker
// socket in; an isolated worker finds them at /workspace and
// /run/autonomic/effect.sock.
const (
	EnvWorkspace    = "AUTONOMIC_WORKSPACE"
	EnvBrokerSocket = "AUTONOMIC_BROKER_SOCKET"
	EnvRelaySocket  = "AUTONOMIC_RELAY_SOCKET"
	EnvEgressSocket = "AUTONOMIC_EGRESS_SOCKET"
)

// Features: no isolation and no checkpoints, and it says so.
func (u *UnsafeLocal) Features() Features {
	return Features{Backend: "unsafe_local"}
}

func (u *UnsafeLocal) warn(msg string, args ...any) {
	if u.Log != nil {
		u.Log.Warn("UnsafeLocal isolates nothing: "+msg, args...)
	}
}

func (u *UnsafeLocal) Preflight(context.Context) (*protocol.PreflightReport, error) {
	u.warn("preflight")
	return &protocol.PreflightReport{Verdict: "refused", Problems: []string{"UnsafeLocal backend: no isolation of any kind"}}, nil
}

func (u *UnsafeLocal) Create(ctx context.Context, spec Spec) (*Running, error) {
	if !protocol.ValidID(spec.ID) || !protocol.ValidID(spec.WorkspaceID) || len(spec.Argv) == 0 {
		return nil, protocol.E(protocol.CodeInvalidField)
	}
	for name, id := range map[string]string{"broker_socket": spec.BrokerSocket, "relay_socket": spec.RelaySocket, "egress_socket": spec.EgressSocket} {
		if id != "" && (!protocol.ValidID(id) || u.SocketsRoot == "") {
			return nil, protocol.Errorf(protocol.CodeInvalidField, "%s", name)
		}
	}
	// Never start a pristine worker where a restored one was asked for.
	if spec.Checkpoint != "" {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "UnsafeLocal has no checkpoints to restore")
	}
	// The child is forked into the kernel's own cgroup; the broker binds
	// that, which is all an unisolated worker can be told apart by.
	cgroup, err := cgroupOf("self")
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeExecFailed, "%w", err)
	}
	u.warn("create", "domain", spec.ID)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.procs == nil {
		u.procs = map[string]localProc{}
	}
	if _, ok := u.procs[spec.ID]; ok {
		return nil, protocol.E(protocol.CodeDomainExists)
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = filepath.Join(u.WorkspacesRoot, spec.WorkspaceID)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + cmd.Dir}
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Last, so a spec's Env cannot point the worker elsewhere.
	cmd.Env = append(cmd.Env, EnvWorkspace+"="+cmd.Dir)
	for env, id := range map[string]string{EnvBrokerSocket: spec.BrokerSocket, EnvRelaySocket: spec.RelaySocket, EnvEgressSocket: spec.EgressSocket} {
		if id != "" {
			cmd.Env = append(cmd.Env, env+"="+filepath.Join(u.SocketsRoot, id+".sock"))
		}
	}
	out := &boundedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A process that left the group may hold the output pipe open
	// forever; the worker's end must not wait for it.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, protocol.Errorf(protocol.CodeExecFailed, "%w", err)
	}
	r := &Running{
		Started: &protocol.Started{DomainID: spec.ID, Generation: spec.Generation, Seccomp: "unfiltered", InitPID: cmd.Process.Pid},
		events:  make(chan Event, 8), done: make(chan struct{}), out: out, cgroup: cgroup,
	}
	u.procs[spec.ID] = localProc{cmd: cmd, done: r.done}
	r.close = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	go func() {
		defer close(r.done)
		defer close(r.events)
		err := cmd.Wait()
		ex := &protocol.Exited{}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
			ex.Signal = ee.Sys().(syscall.WaitStatus).Signal().String()
		} else {
			code := cmd.ProcessState.ExitCode()
			ex.ExitCode = &code
		}
		u.mu.Lock()
		delete(u.procs, spec.ID)
		u.mu.Unlock()
		r.exited = ex
		r.deliver(Event{Exited: ex, Isolation: unsafeIsolation})
	}()
	return r, nil
}

// cgroupOf reads the cgroup v2 path of a /proc entry ("self" or a pid).
func cgroupOf(proc string) (string, error) {
	b, err := os.ReadFile("/proc/" + proc + "/cgroup")
	if err != nil {
		return "", err
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if p, ok := bytes.CutPrefix(line, []byte("0::")); ok && len(p) > 0 {
			return string(p), nil
		}
	}
	return "", errors.New("no cgroup v2 entry")
}

func (u *UnsafeLocal) state(id string) *protocol.DomainState {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.procs[id]
	// Exists until reaped: Destroy waits for that.
	return &protocol.DomainState{DomainID: id, Exists: ok, Populated: ok}
}

func (u *UnsafeLocal) signal(id string, sig syscall.Signal) error {
	u.mu.Lock()
	p, ok := u.procs[id]
	u.mu.Unlock()
	if !ok {
		return protocol.E(protocol.CodeDomainNotFound)
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (u *UnsafeLocal) Freeze(_ context.Context, id string) (*protocol.DomainState, error) {
	u.warn("freeze by SIGSTOP", "domain", id)
	return u.state(id), u.signal(id, syscall.SIGSTOP)
}

func (u *UnsafeLocal) Thaw(_ context.Context, id string) (*protocol.DomainState, error) {
	return u.state(id), u.signal(id, syscall.SIGCONT)
}

func (u *UnsafeLocal) Checkpoint(context.Context, string) (*protocol.CheckpointResult, error) {
	return nil, protocol.Errorf(protocol.CodeLauncherFailed, "UnsafeLocal has no checkpoints")
}

// Import: with no checkpoint store there is nothing to import into.
func (u *UnsafeLocal) Import(context.Context, string, string) (*protocol.CheckpointResult, error) {
	return nil, protocol.Errorf(protocol.CodeLauncherFailed, "UnsafeLocal has no checkpoints to import into")
}

func (u *UnsafeLocal) Destroy(ctx context.Context, id string) (*protocol.DomainState, error) {
	u.warn("destroy by SIGKILL to the process group (escaped processes survive)", "domain", id)
	u.mu.Lock()
	p, ok := u.procs[id]
	u.mu.Unlock()
	if !ok {
		return &protocol.DomainState{DomainID: id, Destroyed: true}, nil
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return nil, err
	}
	// Destroyed means reaped, so an Inspect that follows finds nothing,
	// as the launcher's destroy waits for an empty cgroup.
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &protocol.DomainState{DomainID: id, Destroyed: true}, nil
}

func (u *UnsafeLocal) Inspect(_ context.Context, id string) (*protocol.DomainState, error) {
	return u.state(id), nil
}
