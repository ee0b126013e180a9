package protocol

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"path"
	"strings"
)

// LauncherVersion is the newest launcher protocol version this build
// speaks. Version 2 adds the release action, version 3 the import action;
// everything else is as in 1.
const LauncherVersion = 3

// LauncherVersions lists every launcher protocol version this build speaks.
func LauncherVersions() []int { return []int{1, 2, LauncherVersion} }

// VersionFor is the version a client sends an action in: the oldest that
// has it, so an older launcher still serves every action it knows.
func VersionFor(action string) int {
	switch action {
	case ActionRelease:
		return 2
	case ActionImport:
		return 3
	}
	return 1
}

// Launcher actions. The launcher does nothing else.
const (
	ActionPreflight  = "preflight"
	ActionCreate     = "create"
	ActionFreeze     = "freeze"
	ActionThaw       = "thaw"
	ActionCheckpoint = "checkpoint"
	ActionDestroy    = "destroy"
	ActionInspect    = "inspect"
	ActionRelease    = "release" // version 2
	ActionImport     = "import"  // version 3
)

// Launcher response types.
const (
	TypeError      = "error"
	TypePreflight  = "preflight"
	TypeStarted    = "started"
	TypeViolation  = "violation"
	TypeExited     = "exited"
	TypeDomain     = "domain"
	TypeCheckpoint = "checkpoint"
)

// Wire limits of the launcher protocol (see README.md).
const (
	MaxArgv          = 256
	MaxArgBytes      = 4096
	MaxArgvBytes     = 64 << 10
	MaxEnv           = 128
	MaxEnvValueBytes = 4096
	MaxSeccompInsns  = 4096
	MaxGeneration    = 1 << 30
)

// ValidID reports whether s is a valid domain, workspace or socket id. The
// pattern admits no '/', '.', or upper case, so an id can never name a path
// component other than itself.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// ValidDigest reports whether s is a lower-case hex SHA-256.
func ValidDigest(s string) bool { return digestPattern.MatchString(s) }

// LauncherRequest is every field any launcher action may carry; which are
// allowed for which action is LauncherRequestSchema's business.
type LauncherRequest struct {
	Protocol  int    `json:"protocol"`
	Action    string `json:"action"`
	RequestID string `json:"request_id"`

	DomainID     string            `json:"domain_id,omitempty"`
	Generation   int               `json:"generation,omitempty"`
	WorkspaceID  string            `json:"workspace_id,omitempty"`
	Checkpoint   string            `json:"checkpoint,omitempty"`
	BrokerSocket string            `json:"broker_socket,omitempty"`
	RelaySocket  string            `json:"relay_socket,omitempty"`
	EgressSocket string            `json:"egress_socket,omitempty"`
	Rootfs       string            `json:"rootfs,omitempty"`
	Argv         []string          `json:"argv,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Cwd          string            `json:"cwd,omitempty"`
	Limits       *ResourceLimits   `json:"limits,omitempty"`
	Seccomp      *SeccompProgram   `json:"seccomp,omitempty"`
	OneShot      bool              `json:"one_shot,omitempty"`
}

// DomainSocket is a per-episode host socket a create request names: the
// launcher resolves <ID>.sock under broker_sockets_root and binds it at
// /run/autonomic/<Name> inside the domain. ID "" binds nothing.
type DomainSocket struct {
	Field, ID, Name string
}

// DomainSockets is the one table of the sockets a domain can hold: the
// broker's, the inference relay's and the egress proxy's.
func (r *LauncherRequest) DomainSockets() []DomainSocket {
	return []DomainSocket{
		{"broker_socket", r.BrokerSocket, "effect.sock"},
		{"relay_socket", r.RelaySocket, "inference.sock"},
		{"egress_socket", r.EgressSocket, "egress.sock"},
	}
}

// ResourceLimits are the resource limits a create asks for; zero means the
// launcher's configured default. None may exceed the configured maximum.
type ResourceLimits struct {
	Pids        uint64 `json:"pids,omitempty"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	CPUMillis   uint64 `json:"cpu_millis,omitempty"` // CPU time per wall second, in ms
	NProc       uint64 `json:"nproc,omitempty"`
	NoFile      uint64 `json:"nofile,omitempty"`
}

// SeccompProgram is a compiled classic-BPF program: little-endian struct
// sock_filter records (8 bytes each) and their SHA-256.
type SeccompProgram struct {
	ProgramB64 string `json:"program_b64"`
	SHA256     string `json:"sha256"`
}

var lifecycle = Fields{Required: []string{"request_id", "domain_id"}}

// launcherRequests and launcherResponses are the schemas built once, for
// the decoders: the exported functions return tables the caller may change.
func launcherRequests() *Schema { return launcherRequestTable.get(LauncherRequestSchema) }

func launcherResponses() *Schema { return launcherResponseTable.get(LauncherResponseSchema) }

var launcherRequestTable, launcherResponseTable schemaOnce

// LauncherRequestSchema is the launcher's admission table: one row per
// action, listing the exact fields that action accepts.
func LauncherRequestSchema() *Schema {
	return &Schema{
		Versions:      LauncherVersions(),
		Discriminator: "action",
		Limits:        Limits{MaxDepth: 4, MaxNodes: 1024},
		Kinds: map[string]Fields{
			ActionPreflight: {Required: []string{"request_id"}},
			ActionCreate: {
				Required: []string{"request_id", "domain_id", "generation", "workspace_id", "argv"},
				Optional: []string{"checkpoint", "broker_socket", "relay_socket", "egress_socket", "rootfs", "env", "cwd", "limits", "seccomp", "one_shot"},
			},
			ActionFreeze:     lifecycle,
			ActionThaw:       lifecycle,
			ActionCheckpoint: lifecycle,
			ActionDestroy:    lifecycle,
			ActionInspect:    lifecycle,
			ActionRelease:    {Required: []string{"request_id", "domain_id", "checkpoint"}},
			ActionImport:     {Required: []string{"request_id", "domain_id", "checkpoint"}},
		},
	}
}

// DecodeLauncherRequest admits, decodes and validates one request frame.
func DecodeLauncherRequest(b []byte) (*LauncherRequest, error) {
	var r LauncherRequest
	if _, err := launcherRequests().decode(b, &r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate checks every field value. It is called on decode and again by
// the kernel before sending, so both sides agree on what is well-formed.
func (r *LauncherRequest) Validate() error {
	if _, ok := launcherRequests().Kinds[r.Action]; !ok {
		return Errorf(CodeUnknownAction, "%q", r.Action)
	}
	if !requestIDPattern.MatchString(r.RequestID) {
		return Errorf(CodeInvalidField, "request_id")
	}
	if r.Action == ActionPreflight {
		return nil
	}
	if !ValidID(r.DomainID) {
		return Errorf(CodeInvalidField, "domain_id")
	}
	if r.Action == ActionRelease || r.Action == ActionImport {
		if r.Protocol < VersionFor(r.Action) {
			return Errorf(CodeUnsupportedVersion, "%s needs version %d", r.Action, VersionFor(r.Action))
		}
		if !ValidDigest(r.Checkpoint) {
			return Errorf(CodeInvalidField, "checkpoint")
		}
		return nil
	}
	if r.Action != ActionCreate {
		return nil
	}
	if r.Generation < 1 || r.Generation > MaxGeneration {
		return Errorf(CodeInvalidField, "generation")
	}
	if !ValidID(r.WorkspaceID) {
		return Errorf(CodeInvalidField, "workspace_id")
	}
	if r.Checkpoint != "" && !ValidDigest(r.Checkpoint) {
		return Errorf(CodeInvalidField, "checkpoint")
	}
	for _, s := range r.DomainSockets() {
		if s.ID != "" && !ValidID(s.ID) {
			return Errorf(CodeInvalidField, "%s", s.Field)
		}
	}
	if r.Rootfs != "" && !ValidID(r.Rootfs) {
		return Errorf(CodeInvalidField, "rootfs")
	}
	if err := validateArgv(r.Argv); err != nil {
		return err
	}
	if len(r.Env) > MaxEnv {
		return Errorf(CodeInvalidField, "env")
	}
	for k, v := range r.Env {
		if !envKeyPattern.MatchString(k) || len(v) > MaxEnvValueBytes || strings.IndexByte(v, 0) >= 0 {
			return Errorf(CodeInvalidField, "env")
		}
	}
	if r.Cwd != "" && (!path.IsAbs(r.Cwd) || path.Clean(r.Cwd) != r.Cwd || len(r.Cwd) > MaxArgBytes || strings.IndexByte(r.Cwd, 0) >= 0) {
		return Errorf(CodeInvalidField, "cwd")
	}
	if r.Seccomp != nil {
		if _, err := r.Seccomp.Decode(); err != nil {
			return err
		}
	}
	return nil
}

// ValidateArgv checks an argv as a create request's: non-empty, within
// the wire limits, no NUL.
func ValidateArgv(argv []string) error { return validateArgv(argv) }

func validateArgv(argv []string) error {
	if len(argv) == 0 || len(argv) > MaxArgv || argv[0] == "" {
		return Errorf(CodeInvalidField, "argv")
	}
	total := 0
	for _, a := range argv {
		total += len(a)
		if len(a) > MaxArgBytes || strings.IndexByte(a, 0) >= 0 {
			return Errorf(CodeInvalidField, "argv")
		}
	}
	if total > MaxArgvBytes {
		return Errorf(CodeInvalidField, "argv")
	}
	return nil
}

// Decode returns the raw program after checking its size, alignment and
// digest; a program that does not match its digest is never installed.
func (p *SeccompProgram) Decode() ([]byte, error) {
	raw, err := base64.StdEncoding.Strict().DecodeString(p.ProgramB64)
	// The decoder skips '\r' and '\n'; only the canonical encoding is
	// admitted, so one program has exactly one wire form.
	if err != nil || len(raw) == 0 || len(raw)%8 != 0 || len(raw)/8 > MaxSeccompInsns ||
		base64.StdEncoding.EncodeToString(raw) != p.ProgramB64 {
		return nil, Errorf(CodeInvalidField, "seccomp.program_b64")
	}
	sum := sha256.Sum256(raw)
	if !ValidDigest(p.SHA256) || hex.EncodeToString(sum[:]) != p.SHA256 {
		return nil, Errorf(CodeInvalidField, "seccomp.sha256")
	}
	return raw, nil
}

// NewSeccompProgram wraps a raw program for the wire.
func NewSeccompProgram(raw []byte) *SeccompProgram {
	sum := sha256.Sum256(raw)
	return &SeccompProgram{ProgramB64: base64.StdEncoding.EncodeToString(raw), SHA256: hex.EncodeToString(sum[:])}
}

// LauncherResponse is one frame from the launcher. Exactly one body field is
// present, the one its Type names.
type LauncherResponse struct {
	Protocol   int               `json:"protocol"`
	RequestID  string            `json:"request_id"`
	Type       string            `json:"type"`
	Error      *Error            `json:"error,omitempty"`
	Preflight  *PreflightReport  `json:"preflight,omitempty"`
	Started    *Started          `json:"started,omitempty"`
	Violation  *Violation        `json:"violation,omitempty"`
	Exited     *Exited           `json:"exited,omitempty"`
	Domain     *DomainState      `json:"domain,omitempty"`
	Checkpoint *CheckpointResult `json:"checkpoint,omitempty"`
}

// LauncherResponseSchema is the kernel's admission table for launcher frames.
func LauncherResponseSchema() *Schema {
	body := func(name string) Fields { return Fields{Required: []string{"request_id", name}} }
	return &Schema{
		Versions:      LauncherVersions(),
		Discriminator: "type",
		Limits:        Limits{MaxDepth: 6, MaxNodes: 2048},
		Kinds: map[string]Fields{
			TypeError:      body("error"),
			TypePreflight:  body("preflight"),
			TypeStarted:    body("started"),
			TypeViolation:  body("violation"),
			TypeExited:     body("exited"),
			TypeDomain:     body("domain"),
			TypeCheckpoint: body("checkpoint"),
		},
	}
}

// DecodeLauncherResponse admits and decodes one launcher frame. An error
// frame whose code is not in the catalogue is itself refused.
func DecodeLauncherResponse(b []byte) (*LauncherResponse, error) {
	var r LauncherResponse
	if _, err := launcherResponses().decode(b, &r); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &r, nil
}

// check judges a decoded frame's values.
func (r *LauncherResponse) check() error {
	if r.Type == TypeError && r.Error != nil {
		if !Known(r.Error.Code) {
			return Errorf(CodeInvalidField, "error.code")
		}
		// The local catalogue's text, not the peer's: a message is fixed
		// per code, and peer-supplied text never becomes our error.
		r.Error = E(r.Error.Code)
	}
	// Admission proved the body field present; null would still leave the
	// client holding a nil body.
	if !r.hasBody() {
		return Errorf(CodeInvalidField, "%s", r.Type)
	}
	// Only an error sent before the request was admitted has no request id
	// to echo; every other frame answers one request.
	if r.RequestID == "" && r.Type != TypeError || r.RequestID != "" && !requestIDPattern.MatchString(r.RequestID) {
		return Errorf(CodeInvalidField, "request_id")
	}
	return nil
}

func (r *LauncherResponse) hasBody() bool {
	switch r.Type {
	case TypeError:
		return r.Error != nil
	case TypePreflight:
		return r.Preflight != nil
	case TypeStarted:
		return r.Started != nil
	case TypeViolation:
		return r.Violation != nil
	case TypeExited:
		return r.Exited != nil
	case TypeDomain:
		return r.Domain != nil
	case TypeCheckpoint:
		return r.Checkpoint != nil
	}
	return false
}

// Encode marshals a response or request for the wire.
func Encode(v any) ([]byte, error) { return json.Marshal(v) }

// Limit names one resource limit and whether this host enforces it.
type Limit struct {
	Name     string `json:"name"`
	Value    uint64 `json:"value"`
	Enforced bool   `json:"enforced"`
	Reason   string `json:"reason,omitempty"`
}

// PreflightReport is what this host enforces.
type PreflightReport struct {
	Kernel            string   `json:"kernel"`
	Arch              string   `json:"arch"`
	Namespaces        []string `json:"namespaces"`
	CgroupV2          bool     `json:"cgroup_v2"`
	CgroupParent      string   `json:"cgroup_parent"`
	CgroupControllers []string `json:"cgroup_controllers"`
	CgroupFreeze      bool     `json:"cgroup_freeze"`
	CgroupKill        bool     `json:"cgroup_kill"`
	Limits            []Limit  `json:"limits"`
	OverlayInUserns   bool     `json:"overlay_in_userns"`
	IdmappedMounts    bool     `json:"idmapped_mounts"`
	SeccompActions    []string `json:"seccomp_actions"`
	SeccompUserNotif  bool     `json:"seccomp_user_notif"`
	RootfsDigest      string   `json:"rootfs_digest"`
	RootfsExpected    string   `json:"rootfs_expected"`
	RootfsMatches     bool     `json:"rootfs_matches"`
	// Rootfses names the rootfses of the launcher's table a create may
	// name now: each opened and verified against its manifest.
	Rootfses       []string `json:"rootfses,omitempty"`
	FloorSHA256    string   `json:"floor_sha256"`
	LauncherSHA256 string   `json:"launcher_sha256"`
	// Features lists every host feature the product uses, by name, each
	// found or missing; a missing required one makes the verdict refused.
	Features []Feature `json:"features,omitempty"`
	Verdict  string    `json:"verdict"` // "ok", "degraded" or "refused"
	Problems []string  `json:"problems,omitempty"`
}

// Feature is one host feature as preflight found it.
type Feature struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Required bool   `json:"required"`
	Detail   string `json:"detail,omitempty"` // the kernel that brought it, or why it is missing
}

// Started says the worker runs, and how it is contained.
type Started struct {
	DomainID     string  `json:"domain_id"`
	Generation   int     `json:"generation"`
	InitPID      int     `json:"init_pid"`
	UIDBase      uint32  `json:"uid_base"`
	Limits       []Limit `json:"limits"`
	Seccomp      string  `json:"seccomp"` // "filtered" or "unfiltered"
	SeccompSHA   string  `json:"seccomp_sha256,omitempty"`
	FloorSHA256  string  `json:"floor_sha256"`
	Notify       bool    `json:"notify"`
	RootfsDigest string  `json:"rootfs_digest"`
	Restored     string  `json:"restored_from,omitempty"`
	OneShot      bool    `json:"one_shot"`
}

// Violation is one refused notified syscall, or a coalesced count of them.
type Violation struct {
	Syscall     string   `json:"syscall"`
	Nr          int32    `json:"nr"`
	Args        []uint64 `json:"args"`
	PID         int32    `json:"pid"`      // inside the domain's PID namespace; 0 if already gone
	HostPID     int32    `json:"host_pid"` // as the host sees it, for correlation with host tools
	MonotonicNs int64    `json:"monotonic_ns"`
	Count       uint64   `json:"count"`
	// Destination is the address a refused connect, sendto, sendmsg or
	// sendmmsg named ("1.1.1.1:443", "[2001:db8::1]:53", "family 17"),
	// read from the worker's memory: evidence, never trusted.
	Destination string `json:"destination,omitempty"`
}

// Exited is the end of a domain's worker.
type Exited struct {
	ExitCode    *int   `json:"exit_code,omitempty"`
	Signal      string `json:"signal,omitempty"`
	CPUUserUs   uint64 `json:"cpu_user_us"`
	CPUSystemUs uint64 `json:"cpu_system_us"`
	MaxRSSBytes uint64 `json:"max_rss_bytes"`
	PeakMemory  uint64 `json:"peak_memory_bytes,omitempty"`
	Killed      string `json:"killed_by,omitempty"` // "kernel_gone" or "external"
	Destroyed   bool   `json:"destroyed"`
}

// DomainState answers freeze, thaw, destroy and inspect.
type DomainState struct {
	DomainID   string `json:"domain_id"`
	Exists     bool   `json:"exists"`
	Generation int    `json:"generation,omitempty"`
	UIDBase    uint32 `json:"uid_base,omitempty"`
	Populated  bool   `json:"populated"`
	Frozen     bool   `json:"frozen"`
	Processes  int    `json:"processes"`
	HasUpper   bool   `json:"has_upper"`
	Destroyed  bool   `json:"destroyed,omitempty"`
}

// CheckpointResult names a stored checkpoint by its content digest.
type CheckpointResult struct {
	DomainID string `json:"domain_id"`
	SHA256   string `json:"sha256"`
	Bytes    int64  `json:"bytes"`
	Entries  int    `json:"entries"`
	// Released (release only): the domain no longer holds the archive;
	// Deleted: nothing else held it, and it is gone from the store.
	Released bool `json:"released,omitempty"`
	Deleted  bool `json:"deleted,omitempty"`
}
