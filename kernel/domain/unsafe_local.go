package domain

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// UnsafeLocal runs the worker as a plain child process of the kernel, for
// development on a machine without root. It ISOLATES NOTHING: no
// namespaces, no cgroup, no seccomp, no overlay; the worker runs as the
// kernel's own user in WorkspacesRoot/<workspace_id>, with the kernel's
// access to the host. Never use it for untrusted code.
type UnsafeLocal struct {
	WorkspacesRoot string
	Log            hclog.Logger

	mu    sync.Mutex
	procs map[string]*exec.Cmd
}

var _ ExecutionDomain = (*UnsafeLocal)(nil)

const unsafeIsolation = "none"

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
	u.warn("create", "domain", spec.ID)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.procs == nil {
		u.procs = map[string]*exec.Cmd{}
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
	out := &boundedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, protocol.Errorf(protocol.CodeExecFailed, "%w", err)
	}
	u.procs[spec.ID] = cmd
	r := &Running{
		Started: &protocol.Started{DomainID: spec.ID, Generation: spec.Generation, Seccomp: "unfiltered", InitPID: cmd.Process.Pid},
		events:  make(chan Event, 8), done: make(chan struct{}), out: out,
	}
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

func (u *UnsafeLocal) state(id string) *protocol.DomainState {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.procs[id]
	return &protocol.DomainState{DomainID: id, Exists: ok, Populated: ok}
}

func (u *UnsafeLocal) signal(id string, sig syscall.Signal) error {
	u.mu.Lock()
	cmd, ok := u.procs[id]
	u.mu.Unlock()
	if !ok {
		return protocol.E(protocol.CodeDomainNotFound)
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
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

func (u *UnsafeLocal) Destroy(_ context.Context, id string) (*protocol.DomainState, error) {
	u.warn("destroy by SIGKILL to the process group (escaped processes survive)", "domain", id)
	if err := u.signal(id, syscall.SIGKILL); err != nil && !errors.Is(err, protocol.E(protocol.CodeDomainNotFound)) {
		return nil, err
	}
	return &protocol.DomainState{DomainID: id, Destroyed: true}, nil
}

func (u *UnsafeLocal) Inspect(_ context.Context, id string) (*protocol.DomainState, error) {
	return u.state(id), nil
}
