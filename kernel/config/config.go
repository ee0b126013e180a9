package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// MaxFileBytes caps the configuration file.
const MaxFileBytes = 1 << 20

// Defaults for absent keys.
const (
	DefaultEffectConcurrency = 8
	DefaultSensorQueue       = 256
	DefaultSpeculationMS     = 0
	DefaultMaxRepairs        = 3
	DefaultOwnerTTLMS        = 15000
	DefaultSensorTimeoutMS   = 10000
	DefaultSensorMaxRequest  = 64 << 10
	DefaultRecoverAfter      = 5
	DefaultRecoverForMS      = 5000
	DefaultHealthIntervalMS  = 1000
	APISocketName            = "api.sock"
	ManagedClusterDirName    = "pg"
)

// Config is the whole configuration file. Every key is documented in
// config/autonomic.example.json (a test enforces it).
type Config struct {
	// Doc is free text for operators (key path → explanation); the kernel
	// never reads it.
	Doc                   map[string]string `json:"_doc,omitempty"`
	StateDir              string            `json:"state_dir"`
	Store                 Store             `json:"store"`
	Domain                Domain            `json:"domain"`
	Sensor                Sensor            `json:"sensor"`
	Targets               Targets           `json:"targets"`
	EffectConcurrency     int               `json:"effect_concurrency"`
	SensorQueue           int               `json:"sensor_queue"`
	SpeculationMS         *int              `json:"speculation_ms"`
	MaxRepairs            *int              `json:"max_repairs"`
	OwnerTTLMS            int               `json:"owner_ttl_ms"`
	AutomaticVerification bool              `json:"automatic_verification"`
	PolicyKeys            map[string]string `json:"policy_keys"`
	DecisionKeys          map[string]string `json:"decision_keys"`
	Regulator             Regulator         `json:"regulator"`
	API                   API               `json:"api"`
	Broker                Broker            `json:"broker"`    // broker.go
	Inference             Inference         `json:"inference"` // relay.go
	Egress                Egress            `json:"egress"`    // egress.go
	Episode               Episode           `json:"episode"`
	Queue                 Queue             `json:"queue"` // queue.go

	// Policy enforcement (issue 12): the kinds automatic verification
	// passes with a "none" rule (kernel/verify.Rule). See globs.go.
	UnverifiedKinds []string `json:"unverified_kinds"`
	// sensorEndpointKeys: sensor.timeout_ms or max_request_bytes was
	// given (before defaults), which only an endpoint sensor reads.
	sensorEndpointKeys bool
}

// SensorKeysUnused reports sensor.timeout_ms or sensor.max_request_bytes
// given with kind rules, which reads no endpoint: serve warns, as for
// every key accepted but not acted on.
func (c *Config) SensorKeysUnused() bool { return c.sensorEndpointKeys && c.Sensor.Kind == SensorRules }

// Regulator tunes the system regulator (kernel/regulator): the autonomy
// level it starts at and may reach, how much sustained health one step
// up needs, and how often serve observes the authority store's health.
type Regulator struct {
	StartLevel       string `json:"start_level"` // observe | advise | act
	MaxLevel         string `json:"max_level"`
	RecoverAfter     int    `json:"recover_after"`
	RecoverForMS     *int   `json:"recover_for_ms"`
	HealthIntervalMS int    `json:"health_interval_ms"`
}

// Regulator levels, as kernel/regulator names them.
const (
	LevelObserve = "observe"
	LevelAdvise  = "advise"
	LevelAct     = "act"
)

// RecoverForMSValue is regulator.recover_for_ms with its default.
func (r Regulator) RecoverForMSValue() int {
	if r.RecoverForMS == nil {
		return DefaultRecoverForMS
	}
	return *r.RecoverForMS
}

// Episode bounds episodes and says where the harvest reads checkpoints.
type Episode struct {
	// WallTimeMS is the wall time of an episode whose spec names none;
	// MaxWallTimeMS the most a spec may ask for (kernel/episode.Config's
	// WallTime and MaxWallTime).
	WallTimeMS    int `json:"wall_time_ms"`
	MaxWallTimeMS int `json:"max_wall_time_ms"`
	// CheckpointsDir is the launcher's <state_root>/checkpoints, which the
	// harvest reads archives from (re-hashing each against its digest).
	// Empty: a spec that asks for a harvest ends harvest_failed.
	CheckpointsDir string `json:"checkpoints_dir"`
	// MaxSetupLayers is how many setup layers the database keeps, least
	// recently used evicted first (0: kernel/episode's default, 8).
	MaxSetupLayers int `json:"max_setup_layers"`
}

// Episode defaults: an hour unless a spec says otherwise, a day at most.
const (
	DefaultEpisodeWallTimeMS    = 3600000
	DefaultEpisodeMaxWallTimeMS = 86400000
)

// Store says where the authority lives: a PostgreSQL URL, or (url empty) a
// managed local cluster under cluster_dir.
type Store struct {
	URL        string `json:"url"`
	AdminURL   string `json:"admin_url"`
	ClusterDir string `json:"cluster_dir"`
	Database   string `json:"database"`
	InstanceID string `json:"instance_id"`
}

// Domain selects the execution backend.
type Domain struct {
	Backend        string `json:"backend"` // linux | unsafe_local
	LauncherPath   string `json:"launcher_path"`
	Direct         bool   `json:"direct"`
	WorkspacesRoot string `json:"workspaces_root"`
	SocketsRoot    string `json:"sockets_root"`
	CgroupParent   string `json:"cgroup_parent"`
}

// Backends.
const (
	BackendLinux       = "linux"
	BackendUnsafeLocal = "unsafe_local"
)

// Sensor selects the semantic sensor implementation.
type Sensor struct {
	Kind            string   `json:"kind"` // rules | openai_compatible
	Endpoint        string   `json:"endpoint"`
	Model           string   `json:"model"`
	AllowedModels   []string `json:"allowed_models"`
	APIKeyEnv       string   `json:"api_key_env"`
	TimeoutMS       int      `json:"timeout_ms"`
	MaxRequestBytes int      `json:"max_request_bytes"`
}

// Sensor kinds.
const (
	SensorRules            = "rules"
	SensorOpenAICompatible = "openai_compatible"
)

// Targets are the broker adapters' trusted targets, by kind then target id.
type Targets struct {
	GitCommit    map[string]GitCommitTarget `json:"git_commit"`
	GitRemote    map[string]GitRemoteTarget `json:"git_remote"`
	HTTPRead     map[string]HTTPTarget      `json:"http_read"`
	HTTPMutation map[string]HTTPTarget      `json:"http_mutation"`
	Artifact     map[string]ArtifactTarget  `json:"artifact"`
}

// GitCommitTarget mirrors broker.GitTarget.
type GitCommitTarget struct {
	Repo        string   `json:"repo"`
	AllowedRefs []string `json:"allowed_refs"`
	// AllowedRefPrefixes: branches under these may be created at their
	// base (autonomic run's one branch per run) and updated.
	AllowedRefPrefixes []string `json:"allowed_ref_prefixes"`
	AllowedPaths       []string `json:"allowed_paths"`
	ForbiddenPaths     []string `json:"forbidden_paths"`
	AuthorName         string   `json:"author_name"`
	AuthorEmail        string   `json:"author_email"`
	VerifyArgv         []string `json:"verify_argv"`
	Class              int      `json:"class"`
	AllowBinary        bool     `json:"allow_binary"`
	// AllowSymlinks admits relative symlinks that stay inside the
	// repository (never one that climbs out or reaches .git).
	AllowSymlinks bool `json:"allow_symlinks"`
	// AllowNonPortable admits names Windows cannot check out.
	AllowNonPortable bool `json:"allow_non_portable_names"`
	// VerifyChangeInputs runs verify_argv with the change's own tests and
	// build files; by default the base's are put back first.
	VerifyChangeInputs bool `json:"verify_change_inputs"`
	// Environment names the launcher rootfs (its rootfses table) the
	// target's agents, setup and verification run on; "" is the agent
	// profile's own.
	Environment string `json:"environment"`
	// Setup runs in the workspace before the agent (npm ci, go mod
	// download, a venv and pip install), with the episode's egress; its
	// result is a layer kept under the environment, the argv and the
	// blobs of SetupLockfiles at the base (empty: the usual lockfiles and
	// manifests at the repository's root), and verification runs on it.
	Setup          []string `json:"setup"`
	SetupLockfiles []string `json:"setup_lockfiles"`
}

// GitRemoteTarget mirrors broker.GitRemoteTarget.
type GitRemoteTarget struct {
	Repo          string   `json:"repo"`
	URL           string   `json:"url"`
	AllowedRefs   []string `json:"allowed_refs"`
	SourceRefs    []string `json:"source_refs"`
	RewindRefs    []string `json:"rewind_refs"`
	CredentialEnv string   `json:"credential_env"`
	Username      string   `json:"username"`
	CAFile        string   `json:"ca_file"`
	Class         int      `json:"class"`
}

// HTTPTarget mirrors broker.HTTPTarget. A credential is named by
// environment variable only.
type HTTPTarget struct {
	BaseURL          string   `json:"base_url"`
	Methods          []string `json:"methods"`
	Paths            []string `json:"paths"`
	AllowedNets      []string `json:"allowed_nets"`
	MaxRequestBytes  int64    `json:"max_request_bytes"`
	MaxResponseBytes int64    `json:"max_response_bytes"`
	TimeoutMS        int      `json:"timeout_ms"`
	CAFile           string   `json:"ca_file"`
	CredentialEnv    string   `json:"credential_env"`
	RatePerMinute    int      `json:"rate_per_minute"`
	ReconcilePath    string   `json:"reconcile_path"`
	Class            int      `json:"class"`
}

// ArtifactTarget mirrors broker.ArtifactTarget.
type ArtifactTarget struct {
	Dir      string `json:"dir"`
	MaxBytes int64  `json:"max_bytes"`
	Class    int    `json:"class"`
}

// API is the operator API's unix socket.
type API struct {
	Socket        string `json:"socket"`
	OperatorGroup string `json:"operator_group"`
	// MetricsListen, when set, serves Prometheus metrics (GET /metrics)
	// on "unix:/abs/path" or a loopback host:port.
	MetricsListen string `json:"metrics_listen"`
	// ConsoleListen, when set, serves the web console on "unix:/abs/path"
	// or a loopback host:port; a token in state_dir/console.token logs in.
	ConsoleListen string `json:"console_listen"`
}

// Problem is one thing wrong with a configuration.
type Problem struct {
	Key     string `json:"key"`
	Problem string `json:"problem"`
}

func (p Problem) String() string { return p.Key + ": " + p.Problem }

// Error lists every problem found. It wraps protocol.CodeInvalidField (or
// the parser's code) so it crosses a boundary as a catalogue code.
type Error struct {
	Problems []Problem
	code     protocol.Code
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "config: " + strings.Join(parts, "; ")
}

// Unwrap exposes the catalogue code.
func (e *Error) Unwrap() error { return protocol.E(e.code) }

func limits() protocol.Limits { return protocol.Limits{MaxDepth: 8, MaxNodes: 1 << 16} }

// Load reads, decodes and validates the file at path. The file must be a
// regular file not readable or writable by others.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		// The path is the operator's own, but errors may reach logs: name
		// the cause (ENOENT, EACCES), not the path.
		cause := "cannot open"
		var pe *os.PathError
		if errors.As(err, &pe) {
			cause += ": " + pe.Err.Error()
		}
		return nil, &Error{Problems: []Problem{{Key: "(file)", Problem: cause}}, code: protocol.CodeNotFound}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &Error{Problems: []Problem{{Key: "(file)", Problem: "not a regular file"}}, code: protocol.CodeInvalidField}
	}
	if st.Mode().Perm()&0o007 != 0 {
		return nil, &Error{Problems: []Problem{{Key: "(file)", Problem: fmt.Sprintf("mode %04o lets other users read or write it; use 0640 or stricter", st.Mode().Perm())}}, code: protocol.CodeInvalidField}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse decodes and validates one configuration document. Relative paths
// are refused rather than resolved against a working directory.
func Parse(b []byte) (*Config, error) {
	c, err := Decode(b)
	if err != nil {
		return nil, err
	}
	if ps := c.validate(); len(ps) > 0 {
		return nil, &Error{Problems: ps, code: protocol.CodeInvalidField}
	}
	return c, nil
}

// Decode parses strictly without validating values (the fuzz target's
// surface).
func Decode(b []byte) (*Config, error) {
	if len(b) > MaxFileBytes {
		return nil, &Error{Problems: []Problem{{Key: "(file)", Problem: fmt.Sprintf("larger than %d bytes", MaxFileBytes)}}, code: protocol.CodeFrameTooLarge}
	}
	if err := protocol.CheckShape(b, limits()); err != nil {
		return nil, parseError(err)
	}
	var c Config
	if err := protocol.DecodeStrict(b, &c); err != nil {
		return nil, parseError(err)
	}
	return &c, nil
}

// parseError turns a strict-decoder error into a Problem naming the key.
// The decoder's local cause names the key ("duplicate_key: \"url\"").
func parseError(err error) error {
	w := protocol.AsWire(err)
	key, problem := "(document)", w.Message
	var multi interface{ Unwrap() []error }
	if errors.As(err, &multi) {
		for _, e := range multi.Unwrap() {
			var pe *protocol.Error
			if errors.As(e, &pe) {
				continue
			}
			detail := e.Error()
			switch w.Code {
			case protocol.CodeDuplicateKey, protocol.CodeUnknownField:
				key = strings.Trim(detail, `"`)
			case protocol.CodeInvalidField:
				if k, rest, ok := strings.Cut(detail, ": "); ok && k != "" && !strings.Contains(k, " ") {
					key, problem = k, "wrong type ("+lastClause(rest)+")"
				}
			default:
				problem = w.Message
			}
		}
	}
	switch w.Code {
	case protocol.CodeDuplicateKey:
		problem = "key appears more than once"
	case protocol.CodeUnknownField:
		problem = "unknown key"
	}
	return &Error{Problems: []Problem{{Key: key, Problem: problem}}, code: w.Code}
}

// lastClause keeps encoding/json's type description but never a value.
func lastClause(s string) string {
	if i := strings.Index(s, "cannot unmarshal "); i >= 0 {
		return s[i:]
	}
	return "invalid value"
}

// Effective values (defaults applied).

// SpeculationMSValue is speculation_ms with its default.
func (c *Config) SpeculationMSValue() int {
	if c.SpeculationMS == nil {
		return DefaultSpeculationMS
	}
	return *c.SpeculationMS
}

// MaxRepairsValue is max_repairs with its default.
func (c *Config) MaxRepairsValue() int {
	if c.MaxRepairs == nil {
		return DefaultMaxRepairs
	}
	return *c.MaxRepairs
}

// APISocket is api.socket, or state_dir/api.sock.
func (c *Config) APISocket() string {
	if c.API.Socket != "" {
		return c.API.Socket
	}
	return filepath.Join(c.StateDir, APISocketName)
}

// ClusterDir is store.cluster_dir, or state_dir/pg, when no URL is set.
func (c *Config) ClusterDir() string {
	if c.Store.ClusterDir != "" {
		return c.Store.ClusterDir
	}
	return filepath.Join(c.StateDir, ManagedClusterDirName)
}

// Managed reports whether the kernel runs its own cluster.
func (c *Config) Managed() bool { return c.Store.URL == "" }

// TargetKinds lists the kinds with at least one target, sorted.
func (c *Config) TargetKinds() []string {
	var out []string
	add := func(k string, n int) {
		if n > 0 {
			out = append(out, k)
		}
	}
	add("git_commit", len(c.Targets.GitCommit))
	add("git_remote", len(c.Targets.GitRemote))
	add("http_read", len(c.Targets.HTTPRead))
	add("http_mutation", len(c.Targets.HTTPMutation))
	add("artifact", len(c.Targets.Artifact))
	sort.Strings(out)
	return out
}

// MarshalRedacted renders the effective configuration for an operator with
// every URL's user info and every key removed.
func (c *Config) MarshalRedacted() ([]byte, error) {
	cp := *c
	cp.Doc = nil
	if cp.Store.URL != "" {
		cp.Store.URL = "(set)"
	}
	if cp.Store.AdminURL != "" {
		cp.Store.AdminURL = "(set)"
	}
	return json.MarshalIndent(cp, "", "  ")
}
