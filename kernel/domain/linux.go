package domain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/seccomp"
)

// DefaultLauncherPath is where provisioning installs the launcher, and the
// only command the sudoers rule allows.
const DefaultLauncherPath = "/usr/local/libexec/autonomic-launcher"

// Linux runs every request as one launcher process.
type Linux struct {
	LauncherPath string // defaults to DefaultLauncherPath
	// Direct runs the launcher without sudo (AUTONOMIC_NO_SUDO=1): only for
	// a kernel that already has the privilege, such as tests run as root.
	Direct bool
	Log    hclog.Logger
	// Observe, when set, is told how long each launcher action took
	// (create: until the worker started), whatever its outcome.
	Observe func(action string, d time.Duration)
}

func (l *Linux) observe(action string, start time.Time) {
	if l.Observe != nil {
		l.Observe(action, time.Since(start))
	}
}

var _ ExecutionDomain = (*Linux)(nil)

// Features: the launcher isolates every domain and checkpoints its upper
// layer.
func (l *Linux) Features() Features {
	return Features{Backend: "linux", Checkpoints: true, Isolated: true}
}

func (l *Linux) command(ctx context.Context) *exec.Cmd {
	path := l.LauncherPath
	if path == "" {
		path = DefaultLauncherPath
	}
	if l.Direct {
		return exec.CommandContext(ctx, path)
	}
	// Exactly the sudoers rule: the launcher, no arguments.
	return exec.CommandContext(ctx, "sudo", "-n", path)
}

// session is one launcher process with its request written.
type session struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	out    *boundedBuffer
	id     string
}

func (l *Linux) start(ctx context.Context, req *protocol.LauncherRequest) (*session, error) {
	// The oldest version with the action: an installed launcher that
	// speaks only version 1 still serves everything but release and import.
	req.Protocol, req.RequestID = protocol.VersionFor(req.Action), uuid.Must(uuid.NewV7()).String()
	if err := req.Validate(); err != nil {
		return nil, err
	}
	b, err := protocol.Encode(req)
	if err != nil {
		return nil, err
	}
	// Refuse what the launcher would refuse, before starting a root process.
	if len(b) > protocol.LauncherRequestMax {
		return nil, protocol.E(protocol.CodeFrameTooLarge)
	}
	cmd := l.command(ctx)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	s := &session{cmd: cmd, out: &boundedBuffer{}, id: req.RequestID}
	// stderr is always a pipe (never our terminal): it carries worker output.
	cmd.Stderr = s.out
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if s.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	// A lifecycle call must not be killed by its context while the launcher
	// is mid-action; the launcher bounds itself. Only Create's monitor is
	// tied to the kernel, through stdin.
	cmd.Cancel = func() error { return nil }
	// Worker output shares the launcher's stderr; a process that escaped
	// the domain's death must not hold our Wait forever.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "start launcher: %w", err)
	}
	if err := protocol.WriteFrame(s.stdin, b, protocol.LauncherRequestMax); err != nil {
		// A launcher that refused before reading (not privileged, bad
		// invocation) has already said why on stdout.
		s.stdin.Close()
		if r, ferr := s.next(); ferr != nil && r == nil && !protocol.IsEOF(ferr) {
			_ = s.cmd.Wait()
			return nil, ferr
		}
		_ = s.cmd.Wait()
		return nil, protocol.Errorf(protocol.CodeLauncherFailed, "write request: %w", err)
	}
	return s, nil
}

func (s *session) abort() {
	s.stdin.Close()
	_ = s.cmd.Wait()
}

// next reads one admitted frame that answers this request.
func (s *session) next() (*protocol.LauncherResponse, error) {
	b, err := protocol.ReadFrame(s.stdout, protocol.LauncherResponseMax, time.Time{})
	if err != nil {
		return nil, err
	}
	r, err := protocol.DecodeLauncherResponse(b)
	if err != nil {
		return nil, err
	}
	if r.RequestID != s.id && !(r.Type == protocol.TypeError && r.RequestID == "") {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "response for another request")
	}
	if r.Type == protocol.TypeError {
		return nil, r.Error
	}
	return r, nil
}

// call runs one short request and expects one frame of type want.
func (l *Linux) call(ctx context.Context, req *protocol.LauncherRequest, want string) (*protocol.LauncherResponse, error) {
	defer l.observe(req.Action, time.Now())
	s, err := l.start(ctx, req)
	if err != nil {
		return nil, err
	}
	s.stdin.Close()
	r, err := s.next()
	werr := s.cmd.Wait()
	if err != nil {
		if protocol.IsEOF(err) {
			return nil, protocol.Errorf(protocol.CodeLauncherFailed, "launcher exited without answering: %w", errors.Join(err, werr))
		}
		return nil, err
	}
	if r.Type != want {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "launcher answered %q, want %q", r.Type, want)
	}
	return r, nil
}

func (l *Linux) Preflight(ctx context.Context) (*protocol.PreflightReport, error) {
	r, err := l.call(ctx, &protocol.LauncherRequest{Action: protocol.ActionPreflight}, protocol.TypePreflight)
	if err != nil {
		return nil, err
	}
	return r.Preflight, nil
}

func (l *Linux) lifecycle(ctx context.Context, action, id string) (*protocol.DomainState, error) {
	r, err := l.call(ctx, &protocol.LauncherRequest{Action: action, DomainID: id}, protocol.TypeDomain)
	if err != nil {
		return nil, err
	}
	return r.Domain, nil
}

func (l *Linux) Freeze(ctx context.Context, id string) (*protocol.DomainState, error) {
	return l.lifecycle(ctx, protocol.ActionFreeze, id)
}

func (l *Linux) Thaw(ctx context.Context, id string) (*protocol.DomainState, error) {
	return l.lifecycle(ctx, protocol.ActionThaw, id)
}

func (l *Linux) Destroy(ctx context.Context, id string) (*protocol.DomainState, error) {
	return l.lifecycle(ctx, protocol.ActionDestroy, id)
}

func (l *Linux) Inspect(ctx context.Context, id string) (*protocol.DomainState, error) {
	return l.lifecycle(ctx, protocol.ActionInspect, id)
}

func (l *Linux) Checkpoint(ctx context.Context, id string) (*protocol.CheckpointResult, error) {
	r, err := l.call(ctx, &protocol.LauncherRequest{Action: protocol.ActionCheckpoint, DomainID: id}, protocol.TypeCheckpoint)
	if err != nil {
		return nil, err
	}
	return r.Checkpoint, nil
}

// Release drops the domain id's hold on a stored checkpoint; the launcher
// deletes the archive once no domain holds it.
func (l *Linux) Release(ctx context.Context, id, digest string) (*protocol.CheckpointResult, error) {
	r, err := l.call(ctx, &protocol.LauncherRequest{Action: protocol.ActionRelease, DomainID: id, Checkpoint: digest}, protocol.TypeCheckpoint)
	if err != nil {
		return nil, err
	}
	return r.Checkpoint, nil
}

// ImportsDir is where, beneath the launcher's workspaces_root, the kernel
// leaves an archive for Import; the launcher keeps the same name.
const ImportsDir = "imports"

// ImportPath is the file the launcher's import reads for digest: the
// kernel writes the archive's bytes there, as its own regular file with
// one link, and removes it after the import (the launcher never does).
func ImportPath(workspacesRoot, digest string) string {
	return filepath.Join(workspacesRoot, ImportsDir, digest+".tar")
}

// Import has the launcher store the archive the kernel left at
// ImportPath(workspaces_root, digest), an archive another host made, under
// its digest, held by the domain id holder until its Release; a Create
// with Checkpoint digest then restores it. It needs protocol version 3.
func (l *Linux) Import(ctx context.Context, holder, digest string) (*protocol.CheckpointResult, error) {
	r, err := l.call(ctx, &protocol.LauncherRequest{Action: protocol.ActionImport, DomainID: holder, Checkpoint: digest}, protocol.TypeCheckpoint)
	if err != nil {
		return nil, err
	}
	return r.Checkpoint, nil
}

// Create starts a domain and returns once the worker runs. The returned
// Running owns the monitor: its events stream until the worker exits.
func (l *Linux) Create(ctx context.Context, spec Spec) (*Running, error) {
	defer l.observe(protocol.ActionCreate, time.Now())
	req := &protocol.LauncherRequest{
		Action: protocol.ActionCreate, DomainID: spec.ID, Generation: spec.Generation, WorkspaceID: spec.WorkspaceID,
		Checkpoint: spec.Checkpoint, BrokerSocket: spec.BrokerSocket, RelaySocket: spec.RelaySocket, EgressSocket: spec.EgressSocket, Rootfs: spec.Rootfs, Argv: spec.Argv, Env: spec.Env, Cwd: spec.Cwd,
		Limits: spec.Limits, OneShot: spec.OneShot,
	}
	if spec.Seccomp != nil {
		req.Seccomp = protocol.NewSeccompProgram(spec.Seccomp)
	}
	s, err := l.start(context.WithoutCancel(ctx), req)
	if err != nil {
		return nil, err
	}
	first, err := s.next()
	if err != nil {
		s.abort()
		return nil, err
	}
	if first.Type != protocol.TypeStarted {
		s.abort()
		return nil, protocol.Errorf(protocol.CodeInvalidField, "launcher answered %q to create", first.Type)
	}
	r := &Running{Started: first.Started, events: make(chan Event, 256), done: make(chan struct{}), out: s.out}
	r.close = s.stdin.Close
	r.monitor = s.cmd.Process.Pid
	if l.Log != nil {
		l.Log.Info("domain started", "domain", spec.ID, "generation", spec.Generation, "seccomp", first.Started.Seccomp)
	}
	go func() {
		defer close(r.done)
		defer close(r.events)
		for {
			f, err := s.next()
			if err != nil {
				s.stdin.Close()
				werr := s.cmd.Wait()
				r.err = fmt.Errorf("monitor ended without an exited frame: %w", errors.Join(err, werr))
				return
			}
			switch f.Type {
			case protocol.TypeViolation:
				// The launcher reports numbers; the name is ours to give.
				f.Violation.Syscall = seccomp.SyscallName(f.Violation.Nr)
				r.deliver(Event{Violation: f.Violation})
			default:
				// Anything else after started breaks the protocol: stop
				// trusting this monitor, which also kills its domain.
				s.stdin.Close()
				werr := s.cmd.Wait()
				r.err = errors.Join(protocol.Errorf(protocol.CodeInvalidField, "unexpected %q frame from a monitor", f.Type), werr)
				return
			case protocol.TypeExited:
				r.exited = f.Exited
				r.deliver(Event{Exited: f.Exited})
				s.stdin.Close()
				_ = s.cmd.Wait()
				return
			}
		}
	}()
	return r, nil
}
