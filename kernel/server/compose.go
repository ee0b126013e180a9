package server

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/egress"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/kernel/metrics"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
	"github.com/autonomic-kernel/autonomic/kernel/relay"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/kernel/targets"
	"github.com/autonomic-kernel/autonomic/kernel/verify"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/seccomp"
	"github.com/autonomic-kernel/autonomic/store"
)

// PayloadsDirName is the broker's payload store under state_dir.
const PayloadsDirName = "payloads"

// Hooks are test seams; production passes the zero value.
type Hooks struct {
	// Ready is called once the API answers.
	Ready func()
	// Owner overrides the workspace and socket owner. Production uses
	// this process's uid/gid: the kernel runs as the service account,
	// which the launcher's workspace_owner_uid/gid must name, and only
	// it can chown the broker sockets it binds to itself.
	Owner *[2]int
	// Broker are the broker's commit points (fault injection: the
	// kernel-level outage test takes the database down inside a commit).
	Broker *broker.Hooks
}

// composition is what compose built: the kernel's parts, in construction order.
type composition struct {
	// regulator is the kernel's one live regulator (nil: no episode
	// controller, which is the only thing it caps).
	regulator *regulator.Live
	broker    *broker.Broker
	domains   domain.ExecutionDomain
	// episodes is nil when the configuration cannot run episodes (see
	// compose); episode start then answers "not available".
	episodes *episode.Controller
	// payloads is the broker's payload store (the API reads patches).
	payloads *broker.Payloads
	// keys is policy_keys as the running kernel holds it (autonomic key add).
	keys *policy.LiveKeys
	// targets is the live set of git_commit targets (autonomic repo add).
	targets *targets.Registry
	// metrics observes the parts above; serve exposes it when
	// metrics.listen is configured.
	metrics *metrics.Metrics
}

// compose builds the kernel in one direction, each part from the ones
// before it and nothing bound later: the store (given) → the live
// regulator → the governor (the fast and slow loops) → the broker
// (payloads under state_dir, the adapters from targets, wrapped by the
// governor, decision_keys, automatic verification through
// Governor.Evaluate) → the episode controller; serve then builds the API
// on them. It admits no work: the caller runs recovery before serving.
func compose(cfg *config.Config, st store.Store, log hclog.Logger, hooks Hooks) (*composition, error) {
	payloads, err := broker.OpenPayloads(filepath.Join(cfg.StateDir, PayloadsDirName))
	if err != nil {
		return nil, fmt.Errorf("payload store: %w", err)
	}
	keys, err := policy.ParseKeys(cfg.DecisionKeys)
	if err != nil {
		return nil, fmt.Errorf("decision_keys: %w", err)
	}
	configuredKeys, err := policy.ParseKeys(cfg.PolicyKeys)
	if err != nil {
		return nil, err
	}
	// policy_keys plus the keys registered while a kernel ran.
	liveKeys, err := policy.OpenLiveKeys(cfg.StateDir, configuredKeys)
	if err != nil {
		return nil, err
	}
	policyKeys := liveKeys.Keys()
	// Targets registered at run time (autonomic repo add) are read back
	// and served as configured ones are.
	configured := cfg.Targets.GitCommit
	added, err := targets.Load(cfg.StateDir, configured)
	if err != nil {
		return nil, err
	}
	cfg.Targets.GitCommit = maps.Clone(configured)
	if cfg.Targets.GitCommit == nil {
		cfg.Targets.GitCommit = map[string]config.GitCommitTarget{}
	}
	maps.Copy(cfg.Targets.GitCommit, added)
	k := &composition{domains: backendFor(cfg, log), payloads: payloads}
	src := metrics.Source{}
	if c, ok := st.(interface {
		Counts(context.Context) (store.Counts, error)
	}); ok {
		src.Counts = c.Counts
	}
	k.metrics = metrics.New(src)
	if l, ok := k.domains.(*domain.Linux); ok {
		l.Observe = k.metrics.ObserveLauncher
	}

	d := cfg.Domain
	episodes := true
	switch {
	case d.Backend == config.BackendUnsafeLocal && (d.WorkspacesRoot == "" || d.SocketsRoot == ""):
		log.Warn("episode controller not composed: unsafe_local needs domain.workspaces_root and domain.sockets_root; episode start answers not available")
		episodes = false
	case d.Backend == config.BackendLinux && (d.WorkspacesRoot == "" || d.SocketsRoot == "" || d.CgroupParent == ""):
		log.Warn("episode controller not composed: domain.workspaces_root, domain.sockets_root and domain.cgroup_parent must mirror the launcher's configuration; episode start answers not available")
		episodes = false
	}
	uid, gid := os.Getuid(), os.Getgid()
	if hooks.Owner != nil {
		uid, gid = hooks.Owner[0], hooks.Owner[1]
	}
	// Without an episode controller the governor watches no episode, so
	// every episode reads as containment and nothing commits; it has no
	// regulator, sensor or verification runner to feed.
	gc := governor.Config{Store: st, SensorQueue: cfg.SensorQueue, Logger: log.Named("governor")}
	var prog, agentProg []byte
	if episodes {
		// The closed set of profiles a spec may name, each compiled once.
		if prog, err = CompileProfile(episode.ProfileWorker); err != nil {
			return nil, fmt.Errorf("worker seccomp profile: %w", err)
		}
		if agentProg, err = CompileProfile(episode.ProfileAgent); err != nil {
			return nil, fmt.Errorf("agent seccomp profile: %w", err)
		}
		rc, err := regulatorConfig(cfg.Regulator)
		if err != nil {
			return nil, err
		}
		if k.regulator, err = regulator.NewLive(*rc, log.Named("regulator")); err != nil {
			return nil, fmt.Errorf("episode: regulator: %w", err)
		}
		gc.Regulator = k.regulator
		if cfg.Sensor.Kind == config.SensorOpenAICompatible {
			if gc.Sensor, err = modelSensor(cfg.Sensor); err != nil {
				return nil, err
			}
		}
		if cfg.AutomaticVerification {
			gc.Verification = &verify.Runner{Domains: k.domains, WorkspacesRoot: d.WorkspacesRoot, OwnerUID: uid, OwnerGID: gid,
				Seccomp: prog, Targets: verifyTargets(cfg), Unverified: cfg.UnverifiedKinds, Logger: log.Named("verify")}
		}
	}
	gov, err := governor.New(gc)
	if err != nil {
		return nil, err
	}

	adapters, err := buildAdapters(cfg, payloads, log)
	if err != nil {
		return nil, err
	}
	// The registry hands a target added at run time to the adapter and the
	// verification runner before it answers.
	var gitc *broker.GitCommit // found before the adapters are wrapped below
	for _, a := range adapters {
		if g, ok := a.(*broker.GitCommit); ok {
			gitc = g
		}
	}
	hooksAdd := []func(string, config.GitCommitTarget) error{func(id string, g config.GitCommitTarget) error {
		if gitc == nil {
			return errors.New("no git_commit adapter")
		}
		return gitc.AddTarget(id, brokerGitTarget(g))
	}}
	if r := gc.Verification; r != nil {
		hooksAdd = append(hooksAdd, func(id string, g config.GitCommitTarget) error { r.AddTarget(id, verifyTarget(g)); return nil })
	}
	k.targets = targets.Open(cfg.StateDir, configured, added, "", hooksAdd...)
	for i, a := range adapters {
		adapters[i] = k.metrics.Adapter(gov.Wrap(a))
	}
	// Trajectory and its table come from the governor: an episode it does
	// not watch reads as containment, so nothing commits for it.
	bc := broker.Config{Store: st, Payloads: payloads, Adapters: adapters, DecisionKeys: map[string]ed25519.PublicKey(keys),
		Trajectory: gov.Trajectory, RegimeMaxClass: governor.RegimeMaxClass(), LeaseCheck: gov.CheckLease, Logger: log.Named("broker"),
		// speculation_ms is the window between prepare and the commit
		// horizon: an effect not committed within it expires, so a worker
		// cannot bank an old evaluation for later.
		EffectTTL: time.Duration(cfg.SpeculationMSValue()) * time.Millisecond, Quota: brokerQuota(cfg.Broker),
		EscalateOutsideLease: cfg.Broker.EscalateOutsideLease}
	// The slow loop (the rule bank, Decide) weighs every class 3+ effect;
	// verification is its first step only when automatic_verification is on.
	bc.Verifier = gov.Evaluate
	bc.Hooks = hooks.Broker
	// An effect waiting on its human parks its episode; the
	// controller is made after the broker it drives.
	var park atomic.Pointer[episode.Controller]
	bc.AwaitingHuman = func(e store.Effect) {
		if c := park.Load(); c != nil {
			c.Park(e)
		}
	}
	if k.broker, err = broker.New(bc); err != nil {
		return nil, err
	}
	if !episodes {
		return k, nil
	}

	ec := episode.Config{Store: st, Broker: k.broker, Domains: k.domains, Governor: gov, Regulator: k.regulator,
		WorkspacesRoot: d.WorkspacesRoot, SocketsRoot: d.SocketsRoot, CgroupParent: d.CgroupParent, OwnerUID: uid, OwnerGID: gid,
		Seccomp: prog, Profiles: map[string][]byte{episode.ProfileAgent: agentProg}, Providers: cfg.Inference.Providers,
		WallTime:    time.Duration(cfg.Episode.WallTimeMS) * time.Millisecond,
		MaxWallTime: time.Duration(cfg.Episode.MaxWallTimeMS) * time.Millisecond,
		PolicyKeys:  policyKeys, LiveKeys: liveKeys, EffectConcurrency: cfg.EffectConcurrency, Logger: log.Named("episode"),
		OnViolation: k.metrics.Violation}
	if cfg.Episode.CheckpointsDir != "" {
		ec.Archives = workspace.ArchiveDir(cfg.Episode.CheckpointsDir)
		if r, ok := st.(episode.Replicas); ok && cfg.Queue.ReplicaMaxBytes > 0 {
			ec.Replicas, ec.ReplicaMaxBytes = r, cfg.Queue.ReplicaMaxBytes
		}
		if l, ok := st.(episode.SetupLayers); ok {
			ec.Layers, ec.MaxSetupLayers = l, cfg.Episode.MaxSetupLayers
		}
	}
	// The harvest carries what the target's adapter would accept: its
	// allow_binary, from the registry the adapter's targets come from.
	ec.HarvestAdmit = func(id string) workspace.Admit {
		t, _ := k.targets.Get(id)
		return workspace.Admit{Binary: t.AllowBinary, Symlinks: t.AllowSymlinks}
	}
	if l, ok := st.(relay.Ledger); ok {
		ec.RelayLedger = l
	}
	if ec.Egress, err = egressConfig(cfg, st); err != nil {
		return nil, err
	}
	if len(policyKeys) == 0 {
		log.Warn("policy_keys is empty: no signed policy can verify until a key is registered (autonomic key add)")
	}
	k.keys = liveKeys
	if k.episodes, err = episode.New(ec); err != nil {
		return nil, err
	}
	park.Store(k.episodes)
	return k, nil
}

// egressConfig is what every episode's egress proxy is made from (nil
// when the store keeps no egress ledger): the operator's egress section and
// the cache every episode on this host shares.
func egressConfig(cfg *config.Config, st store.Store) (*episode.EgressConfig, error) {
	l, ok := st.(egress.Ledger)
	if !ok {
		return nil, nil
	}
	cache, err := egress.OpenCache(cfg.Egress.CacheDirValue(cfg.StateDir))
	if err != nil {
		return nil, fmt.Errorf("egress cache: %w", err)
	}
	return &episode.EgressConfig{Operator: cfg.Egress, Ledger: l, Cache: cache}, nil
}

// regulatorConfig maps the validated regulator keys onto kernel/regulator.
func regulatorConfig(r config.Regulator) (*regulator.Config, error) {
	start, ok1 := regulator.ParseLevel(r.StartLevel)
	maxLevel, ok2 := regulator.ParseLevel(r.MaxLevel)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("regulator: levels must be observe, advise or act")
	}
	rc := &regulator.Config{Start: start, Max: maxLevel, RecoverAfter: r.RecoverAfter,
		RecoverFor: time.Duration(r.RecoverForMSValue()) * time.Millisecond}
	if err := rc.Validate(); err != nil {
		return nil, fmt.Errorf("regulator: %w", err)
	}
	return rc, nil
}

// modelSensor is the openai_compatible sensor bank. The key is read from
// the named environment variable once, here, and never logged.
func modelSensor(c config.Sensor) (*sensor.Client, error) {
	cc := sensor.ClientConfig{Endpoint: c.Endpoint, Model: c.Model, AllowedModels: c.AllowedModels,
		Timeout: time.Duration(c.TimeoutMS) * time.Millisecond, RequestLimit: c.MaxRequestBytes,
		EvidenceLimit: max(1<<10, c.MaxRequestBytes*3/4), ResponseLimit: 64 << 10}
	if c.APIKeyEnv != "" {
		key := os.Getenv(c.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("sensor.api_key_env: the named variable is empty or unset")
		}
		cc.APIKey = sensor.Secret(key)
	}
	cl, err := sensor.NewClient(cc)
	if err != nil {
		return nil, fmt.Errorf("sensor: %w", err)
	}
	return cl, nil
}

// recoverAtStart is kernel start: settle every unsettled effect, then fence,
// destroy and resume or contain each active episode. Nothing new is
// admitted before it returns.
func (k *composition) recoverAtStart(ctx context.Context, log hclog.Logger) error {
	start := time.Now()
	if k.episodes == nil {
		settled, err := k.broker.Reconcile(ctx, uuid.Nil)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		log.Info("recovery: effects reconciled", "settled", len(settled), "ms", time.Since(start).Milliseconds())
		return nil
	}
	rec, err := k.episodes.Recover(ctx)
	resumed := make([]string, 0, len(rec.Resumed))
	for _, e := range rec.Resumed {
		resumed = append(resumed, e.ID().String())
	}
	log.Info("recovery", "settled", len(rec.Settled), "destroyed", rec.Destroyed, "resumed", resumed,
		"contained", len(rec.Contained), "ended", len(rec.Ended), "skipped", len(rec.Skipped), "ms", time.Since(start).Milliseconds())
	for id, why := range rec.Contained {
		log.Warn("recovery: episode contained", "episode", id, "why", why)
	}
	for id, o := range rec.Ended {
		log.Info("recovery: episode ended with its landed harvest", "episode", id, "outcome", string(o.Kind), "effect", o.Effect)
	}
	for id, why := range rec.Skipped {
		log.Warn("recovery: episode skipped (another kernel owns it)", "episode", id, "why", why)
	}
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	return nil
}

// backendFor is the configured domain backend. AUTONOMIC_NO_SUDO=1 runs
// the launcher directly, as domain.direct does.
func backendFor(cfg *config.Config, log hclog.Logger) domain.ExecutionDomain {
	if cfg.Domain.Backend == config.BackendUnsafeLocal {
		return &domain.UnsafeLocal{WorkspacesRoot: cfg.Domain.WorkspacesRoot, SocketsRoot: cfg.Domain.SocketsRoot, Log: log.Named("UNSAFE_LOCAL")}
	}
	return &domain.Linux{LauncherPath: cfg.Domain.LauncherPath, Direct: cfg.Domain.Direct || os.Getenv("AUTONOMIC_NO_SUDO") == "1",
		Log: log.Named("domain")}
}

// httpCredentialHeader is how a credential_env value is sent: the one
// scheme the configuration can name today.
const (
	httpCredentialHeader = "Authorization"
	httpCredentialPrefix = "Bearer "
)

// brokerGitTarget is a configured (or registered) git_commit target as the
// adapter holds it.
func brokerGitTarget(g config.GitCommitTarget) broker.GitTarget {
	return broker.GitTarget{Repo: g.Repo, AllowedRefs: g.AllowedRefs, AllowedRefPrefixes: g.AllowedRefPrefixes, AllowedPaths: g.AllowedPaths,
		ForbiddenPaths: g.ForbiddenPaths, AuthorName: g.AuthorName, AuthorEmail: g.AuthorEmail, Class: g.Class,
		AllowBinary: g.AllowBinary, AllowSymlinks: g.AllowSymlinks, AllowNonPortable: g.AllowNonPortable}
}

// verifyTarget is a git_commit target as the verification runner holds it.
func verifyTarget(g config.GitCommitTarget) verify.Target {
	return verify.Target{Repo: g.Repo, Argv: g.VerifyArgv, ChangeInputs: g.VerifyChangeInputs}
}

// buildAdapters maps every configured target onto its broker adapter. The
// configuration was validated by config.Load; what remains to check here is
// only what the broker's types parse (CIDRs).
func buildAdapters(cfg *config.Config, payloads *broker.Payloads, log hclog.Logger) ([]broker.Adapter, error) {
	t := cfg.Targets
	var out []broker.Adapter
	// git_commit is always served: `autonomic repo add` may register its
	// first target while the kernel runs.
	gitc := &broker.GitCommit{Targets: map[string]broker.GitTarget{}, Limits: gitLimits(cfg.Broker), Log: log.Named("git_commit")}
	for id, g := range t.GitCommit {
		gitc.Targets[id] = brokerGitTarget(g)
	}
	out = append(out, gitc)
	if len(t.GitRemote) > 0 {
		a := &broker.GitRemote{Targets: map[string]broker.GitRemoteTarget{}, Log: log.Named("git_remote")}
		for id, g := range t.GitRemote {
			rt := broker.GitRemoteTarget{Repo: g.Repo, URL: g.URL, AllowedRefs: g.AllowedRefs, SourceRefs: g.SourceRefs,
				RewindRefs: g.RewindRefs, Username: g.Username, CAFile: g.CAFile, Class: g.Class}
			// By reference, as for HTTP: read at commit, handed to git by
			// the broker's credential helper.
			if g.CredentialEnv != "" {
				rt.Credential = &broker.Credential{Env: g.CredentialEnv}
			}
			a.Targets[id] = rt
		}
		out = append(out, a)
	}
	for _, kind := range []struct {
		name     string
		mutation bool
		targets  map[string]config.HTTPTarget
	}{{"http_read", false, t.HTTPRead}, {"http_mutation", true, t.HTTPMutation}} {
		if len(kind.targets) == 0 {
			continue
		}
		a := &broker.HTTP{Mutation: kind.mutation, Targets: map[string]broker.HTTPTarget{}, Payloads: payloads}
		for id, h := range kind.targets {
			bt, err := httpTarget(h)
			if err != nil {
				return nil, fmt.Errorf("targets.%s.%s.%w", kind.name, id, err)
			}
			a.Targets[id] = bt
		}
		out = append(out, a)
	}
	if len(t.Artifact) > 0 {
		a := &broker.Artifact{Targets: map[string]broker.ArtifactTarget{}}
		for id, at := range t.Artifact {
			a.Targets[id] = broker.ArtifactTarget{Dir: at.Dir, MaxBytes: at.MaxBytes, Class: at.Class}
		}
		out = append(out, a)
	}
	return out, nil
}

// gitLimits and brokerQuota carry the broker section of the configuration
// (validated, defaults applied) to the broker.
func gitLimits(b config.Broker) broker.GitLimits {
	return broker.GitLimits{MaxResultBytes: int64(b.MaxPatchResultBytes), MemoryBytes: int64(b.GitMemoryBytes),
		Timeout: time.Duration(b.GitTimeoutMS) * time.Millisecond, MaxOutputBytes: b.GitMaxOutputBytes,
		DiskReserveBytes: int64(b.DiskReserveBytesValue())}
}

func brokerQuota(b config.Broker) broker.Quota {
	q := broker.Quota{PreparesPerEpisode: int64(b.PreparesPerEpisode), PreparesPerMinute: b.PreparesPerMinute,
		PayloadBytesPerEpisode: int64(b.PayloadBytesPerEpisode), Retention: time.Duration(b.PayloadRetentionHours) * time.Hour,
		DiskReserveBytes: int64(b.DiskReserveBytesValue())}
	if q.DiskReserveBytes == 0 {
		q.DiskReserveBytes = -1 // configured none (the broker's zero means its default)
	}
	return q
}

func httpTarget(h config.HTTPTarget) (broker.HTTPTarget, error) {
	bt := broker.HTTPTarget{BaseURL: strings.TrimSuffix(h.BaseURL, "/"), Methods: h.Methods, Paths: h.Paths,
		MaxRequestBytes: h.MaxRequestBytes, MaxResponseBytes: h.MaxResponseBytes, Timeout: time.Duration(h.TimeoutMS) * time.Millisecond,
		CAFile: h.CAFile, RatePerMinute: h.RatePerMinute, ReconcilePath: h.ReconcilePath, Class: h.Class}
	for _, n := range h.AllowedNets {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return bt, fmt.Errorf("allowed_nets: not a CIDR prefix")
		}
		bt.AllowedNets = append(bt.AllowedNets, p)
	}
	// By reference: the broker reads the variable at commit time; the
	// value is never in the configuration, a log or the worker's view.
	if h.CredentialEnv != "" {
		bt.Credential = &broker.Credential{Header: httpCredentialHeader, Prefix: httpCredentialPrefix, Env: h.CredentialEnv}
	}
	return bt, nil
}

// verifyTargets are the git_commit targets' verify_argv, for the
// verification runner. A target without one cannot pass automatic
// verification: its class 3+ effects never commit (fail closed).
func verifyTargets(cfg *config.Config) map[string]verify.Target {
	out := map[string]verify.Target{}
	for id, g := range cfg.Targets.GitCommit {
		if len(g.VerifyArgv) > 0 {
			out[id] = verifyTarget(g)
		}
	}
	return out
}

// unusedKeys lists the configuration keys this kernel accepts but does not
// act on yet, each with why. Startup logs them: none is silently ignored.
func unusedKeys(cfg *config.Config, k *composition) []string {
	var out []string
	if !cfg.AutomaticVerification || k.episodes == nil {
		for _, id := range sortedKeys(cfg.Targets.GitCommit) {
			if len(cfg.Targets.GitCommit[id].VerifyArgv) > 0 {
				out = append(out, "targets.git_commit."+id+".verify_argv (automatic verification is off)")
			}
		}
	}
	if cfg.SensorKeysUnused() {
		out = append(out, "sensor.timeout_ms, sensor.max_request_bytes (sensor.kind rules reads no endpoint)")
	}
	if k.episodes == nil {
		out = append(out, "sensor, sensor_queue, max_repairs, policy_keys, effect_concurrency, regulator, episode (no episode controller)")
	} else if !cfg.AutomaticVerification {
		out = append(out, "sensor (the sensor bank runs at evaluate, after automatic verification, which is off)")
	}
	return out
}

// verificationGaps are git_commit targets whose effects cannot commit
// under automatic verification because they name no verify_argv.
func verificationGaps(cfg *config.Config) []string {
	if !cfg.AutomaticVerification {
		return nil
	}
	var out []string
	for _, id := range sortedKeys(cfg.Targets.GitCommit) {
		if len(cfg.Targets.GitCommit[id].VerifyArgv) == 0 {
			out = append(out, id)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// CompileProfile compiles a shipped profile by name, or a profile file
// when name is a path, for this host (user_notif when it has it).
func CompileProfile(name string) ([]byte, error) {
	var p seccomp.Profile
	var err error
	if strings.ContainsRune(name, '/') {
		b, rerr := os.ReadFile(name)
		if rerr != nil {
			return nil, rerr
		}
		p, err = seccomp.Parse(b)
	} else {
		p, err = seccomp.Shipped(name)
	}
	if err != nil {
		return nil, err
	}
	prog, err := seccomp.Compile(p, seccomp.Options{NotifyUnsupported: !userNotifAvailable()})
	if err != nil {
		return nil, err
	}
	return prog.Bytes(), nil
}

func userNotifAvailable() bool {
	b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	return err == nil && strings.Contains(string(b), "user_notif")
}
