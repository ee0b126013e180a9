package domain

import (
	"context"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Spec describes a domain to create.
type Spec struct {
	ID           string
	Generation   int
	WorkspaceID  string
	Checkpoint   string // restore this checkpoint digest into the new generation
	BrokerSocket string // id of the episode's broker socket, if any
	RelaySocket  string // id of the episode's inference relay socket, if any
	EgressSocket string // id of the episode's egress proxy socket, if any
	Rootfs       string // a name from the launcher's rootfses table; "" is its default rootfs
	Argv         []string
	Env          map[string]string
	Cwd          string
	Limits       *protocol.ResourceLimits
	Seccomp      []byte // compiled BPF program; nil runs unfiltered
	OneShot      bool   // destroy as soon as the worker exits
}

// Event is one thing a domain's monitor reported after start.
type Event struct {
	Violation *protocol.Violation
	Exited    *protocol.Exited
	// Isolation is "none" for UnsafeLocal and empty for real domains.
	Isolation string
}

// Features are what a backend promises beyond running a worker. A consumer
// reads them before it relies on a promise, never by trying it and
// reading the failure.
type Features struct {
	// Backend names the backend as the configuration does: "linux" or
	// "unsafe_local".
	Backend string
	// Checkpoints: Checkpoint snapshots a running domain and
	// Spec.Checkpoint restores one into a new generation.
	Checkpoints bool
	// Isolated: the worker runs in its own namespaces, under seccomp, in
	// the cgroup <cgroup_parent>/<domain id>. False means a plain host
	// process with the kernel's user and access (Running.Cgroup names
	// the cgroup it shares).
	Isolated bool
}

// ExecutionDomain creates and manages domains. Implementations are safe for
// concurrent use; each lifecycle call is independent of a running create.
type ExecutionDomain interface {
	Features() Features
	Preflight(ctx context.Context) (*protocol.PreflightReport, error)
	Create(ctx context.Context, spec Spec) (*Running, error)
	Freeze(ctx context.Context, id string) (*protocol.DomainState, error)
	Thaw(ctx context.Context, id string) (*protocol.DomainState, error)
	Checkpoint(ctx context.Context, id string) (*protocol.CheckpointResult, error)
	Destroy(ctx context.Context, id string) (*protocol.DomainState, error)
	Inspect(ctx context.Context, id string) (*protocol.DomainState, error)
}
