package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/protocol/gitref"
	"github.com/autonomic-kernel/autonomic/protocol/pathglob"
)

var (
	targetIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
	envPattern      = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,127}$`)
	dbPattern       = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

type checker struct{ ps []Problem }

func (c *checker) add(key, format string, args ...any) {
	c.ps = append(c.ps, Problem{Key: key, Problem: fmt.Sprintf(format, args...)})
}

// absPath: required (or optional) absolute, clean path.
func (c *checker) absPath(key, p string, required bool) {
	switch {
	case p == "":
		if required {
			c.add(key, "is required")
		}
	case !filepath.IsAbs(p):
		c.add(key, "must be an absolute path")
	case filepath.Clean(p) != p:
		c.add(key, "must be a clean path (no .., //, or trailing /)")
	}
}

func (c *checker) nonNegative(key string, v int64) {
	if v < 0 {
		c.add(key, "must not be negative")
	}
}

// defaulted fills an absent (zero) *v with def; a value given must be in
// lo..hi.
func (c *checker) defaulted(key string, v *int, def, lo, hi int) {
	switch {
	case *v == 0:
		*v = def
	case *v < lo || *v > hi:
		c.add(key, "must be %d..%d", lo, hi)
	}
}

// optional: a value given (zero included) must be in lo..hi.
func (c *checker) optional(key string, v *int, lo, hi int) {
	if v != nil && (*v < lo || *v > hi) {
		c.add(key, "must be %d..%d", lo, hi)
	}
}

func (c *checker) class(key string, v, lo int) {
	if v != 0 && (v < lo || v > 4) {
		c.add(key, "must be 0 (the adapter's default) or %d..4", lo)
	}
}

// validate checks every value, applies defaults to absent keys and returns
// every problem, sorted by key.
func (cfg *Config) validate() []Problem {
	c := &checker{}
	c.absPath("state_dir", cfg.StateDir, true)

	// store
	s := &cfg.Store
	if s.URL == "" {
		if s.AdminURL != "" {
			c.add("store.admin_url", "is only for an external database; leave it empty with a managed cluster")
		}
		c.absPath("store.cluster_dir", s.ClusterDir, false)
	} else {
		if s.ClusterDir != "" {
			c.add("store.cluster_dir", "must be empty when store.url names an external database")
		}
		checkDBURL(c, "store.url", s.URL)
		if s.AdminURL != "" {
			checkDBURL(c, "store.admin_url", s.AdminURL)
		}
	}
	if s.Database == "" {
		s.Database = "autonomic"
	} else if !dbPattern.MatchString(s.Database) {
		c.add("store.database", "must match %s", dbPattern)
	}
	if len(s.InstanceID) > 256 {
		c.add("store.instance_id", "must be at most 256 bytes")
	}

	// domain
	d := &cfg.Domain
	switch d.Backend {
	case "":
		c.add("domain.backend", "is required: %q or %q", BackendLinux, BackendUnsafeLocal)
	case BackendLinux:
		c.absPath("domain.launcher_path", d.LauncherPath, false)
	case BackendUnsafeLocal:
		if d.LauncherPath != "" || d.Direct {
			c.add("domain.backend", "unsafe_local uses no launcher; remove domain.launcher_path and domain.direct")
		}
	default:
		c.add("domain.backend", "must be %q or %q", BackendLinux, BackendUnsafeLocal)
	}
	c.absPath("domain.workspaces_root", d.WorkspacesRoot, false)
	c.absPath("domain.sockets_root", d.SocketsRoot, false)
	if d.CgroupParent != "" && (!strings.HasPrefix(d.CgroupParent, "/") || filepath.Clean(d.CgroupParent) != d.CgroupParent) {
		c.add("domain.cgroup_parent", "must be a clean path starting with / (as /proc/<pid>/cgroup names it)")
	}

	// sensor
	se := &cfg.Sensor
	switch se.Kind {
	case SensorRules:
		if se.Endpoint != "" || se.Model != "" || len(se.AllowedModels) > 0 || se.APIKeyEnv != "" {
			c.add("sensor.kind", "rules takes no endpoint, model, allowed_models or api_key_env")
		}
	case SensorOpenAICompatible:
		u, err := url.Parse(se.Endpoint)
		switch {
		case se.Endpoint == "":
			c.add("sensor.endpoint", "is required for openai_compatible")
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			c.add("sensor.endpoint", "must be an http(s) URL with a host")
		case u.User != nil:
			c.add("sensor.endpoint", "must not carry user info; name the key with sensor.api_key_env")
		}
		if len(se.AllowedModels) == 0 {
			c.add("sensor.allowed_models", "must pin at least one model name")
		}
		if se.Model == "" {
			c.add("sensor.model", "is required for openai_compatible")
		} else if len(se.AllowedModels) > 0 && !slices.Contains(se.AllowedModels, se.Model) {
			c.add("sensor.model", "is not in sensor.allowed_models")
		}
		if se.APIKeyEnv != "" && !envPattern.MatchString(se.APIKeyEnv) {
			c.add("sensor.api_key_env", "must be an environment variable name (%s)", envPattern)
		}
	case "":
		c.add("sensor.kind", "is required: %q or %q", SensorRules, SensorOpenAICompatible)
	default:
		c.add("sensor.kind", "must be %q or %q", SensorRules, SensorOpenAICompatible)
	}
	cfg.sensorEndpointKeys = se.TimeoutMS != 0 || se.MaxRequestBytes != 0
	c.defaulted("sensor.timeout_ms", &se.TimeoutMS, DefaultSensorTimeoutMS, 1, 600000)
	c.defaulted("sensor.max_request_bytes", &se.MaxRequestBytes, DefaultSensorMaxRequest, 1024, 16<<20)

	checkTargets(c, &cfg.Targets)
	checkUnverified(c, cfg.UnverifiedKinds)

	// numbers
	c.defaulted("effect_concurrency", &cfg.EffectConcurrency, DefaultEffectConcurrency, 1, 1024)
	c.defaulted("sensor_queue", &cfg.SensorQueue, DefaultSensorQueue, 1, 1<<20)
	c.optional("speculation_ms", cfg.SpeculationMS, 0, 60000)
	c.optional("max_repairs", cfg.MaxRepairs, 0, 100)
	c.defaulted("owner_ttl_ms", &cfg.OwnerTTLMS, DefaultOwnerTTLMS, 1000, 600000)

	checkRegulator(c, &cfg.Regulator)
	checkBroker(c, &cfg.Broker)
	checkQueue(c, &cfg.Queue)
	checkInference(c, &cfg.Inference)
	checkEgress(c, &cfg.Egress)
	c.defaulted("episode.max_wall_time_ms", &cfg.Episode.MaxWallTimeMS, DefaultEpisodeMaxWallTimeMS, 1000, 30*86400000)
	c.defaulted("episode.wall_time_ms", &cfg.Episode.WallTimeMS, min(DefaultEpisodeWallTimeMS, cfg.Episode.MaxWallTimeMS), 1000, cfg.Episode.MaxWallTimeMS)
	c.absPath("episode.checkpoints_dir", cfg.Episode.CheckpointsDir, false)
	if n := cfg.Episode.MaxSetupLayers; n < 0 || n > 1024 {
		c.add("episode.max_setup_layers", "must be 0..1024")
	}

	if _, err := policy.ParseKeys(cfg.PolicyKeys); err != nil {
		c.add("policy_keys", "%s", strings.TrimPrefix(err.Error(), "policy_keys: "))
	}
	if _, err := policy.ParseKeys(cfg.DecisionKeys); err != nil {
		c.add("decision_keys", "%s", strings.TrimPrefix(err.Error(), "policy_keys: "))
	}

	c.absPath("api.socket", cfg.API.Socket, false)
	c.localListen("api.metrics_listen", cfg.API.MetricsListen)
	c.localListen("api.console_listen", cfg.API.ConsoleListen)
	if m, cl := cfg.API.MetricsListen, cfg.API.ConsoleListen; m != "" && m == cl {
		c.add("api.console_listen", "must differ from api.metrics_listen")
	}
	if g := cfg.API.OperatorGroup; g != "" {
		if _, err := user.LookupGroup(g); err != nil {
			c.add("api.operator_group", "group %q does not exist on this host", g)
		}
	}

	sort.SliceStable(c.ps, func(i, j int) bool { return c.ps[i].Key < c.ps[j].Key })
	return c.ps
}

// checkRegulator fills the regulator's defaults: it starts at observe
// (health is unknown until observed) and may reach act.
func checkRegulator(c *checker, r *Regulator) {
	rank := map[string]int{LevelObserve: 0, LevelAdvise: 1, LevelAct: 2}
	if r.StartLevel == "" {
		r.StartLevel = LevelObserve
	}
	if r.MaxLevel == "" {
		r.MaxLevel = LevelAct
	}
	start, okStart := rank[r.StartLevel]
	maxLevel, okMax := rank[r.MaxLevel]
	if !okStart {
		c.add("regulator.start_level", "must be observe, advise or act")
	}
	if !okMax {
		c.add("regulator.max_level", "must be observe, advise or act")
	}
	if okStart && okMax && start > maxLevel {
		c.add("regulator.start_level", "is above regulator.max_level")
	}
	c.defaulted("regulator.recover_after", &r.RecoverAfter, DefaultRecoverAfter, 1, 10000)
	c.optional("regulator.recover_for_ms", r.RecoverForMS, 0, 3600000)
	c.defaulted("regulator.health_interval_ms", &r.HealthIntervalMS, DefaultHealthIntervalMS, 50, 600000)
}

// checkDBURL accepts postgres:// URLs and libpq keyword strings; it never
// echoes the value (it may carry a password).
func checkDBURL(c *checker, key, v string) {
	if strings.HasPrefix(v, "postgres://") || strings.HasPrefix(v, "postgresql://") {
		if _, err := url.Parse(v); err != nil {
			c.add(key, "is not a valid URL")
		}
		return
	}
	if !strings.Contains(v, "=") {
		c.add(key, "must be a postgres:// URL or a libpq keyword=value string")
	}
}

func checkTargets(c *checker, t *Targets) {
	ids := func(kind string, keys []string) {
		for _, id := range keys {
			if !targetIDPattern.MatchString(id) {
				c.add("targets."+kind, "target id %q must match %s", id, targetIDPattern)
			}
		}
	}
	ids("git_commit", mapKeys(t.GitCommit))
	for id, g := range t.GitCommit {
		k := "targets.git_commit." + id
		c.absPath(k+".repo", g.Repo, true)
		if len(g.AllowedRefs) == 0 && len(g.AllowedRefPrefixes) == 0 {
			c.add(k+".allowed_refs", "must name at least one ref (or allowed_ref_prefixes one prefix)")
		}
		for _, r := range g.AllowedRefs {
			if !strings.HasPrefix(r, "refs/") {
				c.add(k+".allowed_refs", "%q is not a full ref name (refs/...)", r)
			}
		}
		for _, p := range g.AllowedRefPrefixes {
			if !gitref.Prefix(p) {
				c.add(k+".allowed_ref_prefixes", "%q is not a branch prefix (refs/heads/NAME/)", p)
			}
		}
		if len(g.AllowedPaths) == 0 {
			c.add(k+".allowed_paths", "must hold at least one glob")
		}
		c.globs(k+".allowed_paths", g.AllowedPaths)
		c.globs(k+".forbidden_paths", g.ForbiddenPaths)
		c.class(k+".class", g.Class, 3)
		if g.Environment != "" && !protocol.ValidID(g.Environment) {
			c.add(k+".environment", "%q is not a rootfs name", g.Environment)
		}
		if len(g.Setup) > 0 {
			if err := protocol.ValidateArgv(g.Setup); err != nil {
				c.add(k+".setup", "is not an argv within the launcher's limits")
			}
		}
		if len(g.SetupLockfiles) > 0 && len(g.Setup) == 0 {
			c.add(k+".setup_lockfiles", "keys a setup layer: it needs setup")
		}
		for _, p := range g.SetupLockfiles {
			if !pathglob.ValidPath(p) {
				c.add(k+".setup_lockfiles", "%q is not a clean path in the repository", p)
			}
		}
	}
	ids("git_remote", mapKeys(t.GitRemote))
	for id, g := range t.GitRemote {
		k := "targets.git_remote." + id
		c.absPath(k+".repo", g.Repo, true)
		if g.URL == "" {
			c.add(k+".url", "is required")
		} else if u, err := url.Parse(g.URL); err == nil && u.User != nil {
			if _, hasPW := u.User.Password(); hasPW {
				c.add(k+".url", "must not carry a password")
			}
		}
		if len(g.AllowedRefs) == 0 {
			c.add(k+".allowed_refs", "must name at least one ref")
		}
		for key, refs := range map[string][]string{".allowed_refs": g.AllowedRefs, ".source_refs": g.SourceRefs, ".rewind_refs": g.RewindRefs} {
			for _, r := range refs {
				if !strings.HasPrefix(r, "refs/") {
					c.add(k+key, "%q is not a full ref name (refs/...)", r)
				}
			}
		}
		if g.CredentialEnv != "" && !envPattern.MatchString(g.CredentialEnv) {
			c.add(k+".credential_env", "must be an environment variable name")
		}
		if strings.ContainsAny(g.Username, "\r\n\x00") || len(g.Username) > 256 {
			c.add(k+".username", "must be one line of at most 256 bytes")
		}
		c.absPath(k+".ca_file", g.CAFile, false)
		c.class(k+".class", g.Class, 3)
	}
	for _, kind := range []string{"http_read", "http_mutation"} {
		m := t.HTTPRead
		lo := 2
		if kind == "http_mutation" {
			m, lo = t.HTTPMutation, 3
		}
		ids(kind, mapKeys(m))
		for id, h := range m {
			k := "targets." + kind + "." + id
			u, err := url.Parse(h.BaseURL)
			switch {
			case h.BaseURL == "":
				c.add(k+".base_url", "is required")
			case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" ||
				(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil:
				c.add(k+".base_url", "must be scheme://host[:port] with no path, query or user info")
			}
			if len(h.Methods) == 0 {
				c.add(k+".methods", "must name at least one method")
			}
			if len(h.Paths) == 0 {
				c.add(k+".paths", "must hold at least one glob")
			}
			c.globs(k+".paths", h.Paths)
			for _, n := range h.AllowedNets {
				if _, err := netip.ParsePrefix(n); err != nil {
					c.add(k+".allowed_nets", "%q is not a CIDR prefix", n)
				}
			}
			c.nonNegative(k+".max_request_bytes", h.MaxRequestBytes)
			c.nonNegative(k+".max_response_bytes", h.MaxResponseBytes)
			c.nonNegative(k+".timeout_ms", int64(h.TimeoutMS))
			c.nonNegative(k+".rate_per_minute", int64(h.RatePerMinute))
			c.absPath(k+".ca_file", h.CAFile, false)
			if h.CredentialEnv != "" && !envPattern.MatchString(h.CredentialEnv) {
				c.add(k+".credential_env", "must be an environment variable name")
			}
			if kind == "http_mutation" && h.ReconcilePath == "" {
				c.add(k+".reconcile_path", "is required for mutations (commit_unknown must be settleable)")
			}
			c.class(k+".class", h.Class, lo)
		}
	}
	ids("artifact", mapKeys(t.Artifact))
	for id, a := range t.Artifact {
		k := "targets.artifact." + id
		c.absPath(k+".dir", a.Dir, true)
		c.nonNegative(k+".max_bytes", a.MaxBytes)
		c.class(k+".class", a.Class, 2)
	}
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isLoopback(host string) bool {
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// localListen: an unauthenticated or token-guarded endpoint binds only a
// Unix socket at an absolute path or a loopback address (optional).
func (c *checker) localListen(key, v string) {
	if v == "" {
		return
	}
	if p, ok := strings.CutPrefix(v, "unix:"); ok {
		c.absPath(key, p, true)
	} else if host, port, err := net.SplitHostPort(v); err != nil || port == "" || !(host == "localhost" || isLoopback(host)) {
		c.add(key, "must be unix:/absolute/path or a loopback host:port")
	}
}

// ValidTargetID reports whether id may name a target.
func ValidTargetID(id string) bool { return targetIDPattern.MatchString(id) }

// CheckGitCommitTarget validates one git_commit target as the
// configuration's own would be (a target registered at run time, or read
// back from the kernel's state): the same rules, the same *Error.
func CheckGitCommitTarget(id string, t GitCommitTarget) error {
	c := &checker{}
	checkTargets(c, &Targets{GitCommit: map[string]GitCommitTarget{id: t}})
	if len(c.ps) > 0 {
		return &Error{Problems: c.ps, code: protocol.CodeInvalidField}
	}
	return nil
}
