package episode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/egress"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
	"github.com/autonomic-kernel/autonomic/kernel/relay"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// Config is the controller's trusted configuration: the paths and ids come
// from the launcher's configuration, which the controller must mirror.
type Config struct {
	Store   store.Store
	Broker  *broker.Broker
	Domains domain.ExecutionDomain
	// WorkspacesRoot and SocketsRoot are the launcher's workspaces_root
	// and broker_sockets_root.
	WorkspacesRoot string
	SocketsRoot    string
	// CgroupParent is the launcher's cgroup_parent as /proc/<pid>/cgroup
	// names it (relative to the cgroup v2 mount, with a leading "/").
	// Unused with an unisolated backend, whose workers share the kernel's
	// cgroup.
	CgroupParent string
	// OwnerUID/GID is workspace_owner_uid/gid: the kernel's account, which
	// owns workspaces and sockets.
	OwnerUID, OwnerGID int
	// Seccomp is the compiled worker profile; the launcher adds its floor.
	// Profiles are the other profiles a spec may name (ProfileAgent),
	// each compiled once by the caller.
	Seccomp  []byte
	Profiles map[string][]byte
	// Providers are inference.providers: a spec's Inference names one,
	// and its relay charges RelayLedger (the store).
	Providers   map[string]config.Provider
	RelayLedger relay.Ledger
	// RelayMemory bounds what every episode's relay holds for calls at
	// once (nil: New makes one of relay.DefaultMemory).
	RelayMemory *relay.Memory
	// OnViolation, when set, is told of each kernel denial a domain
	// reports (the metrics endpoint counts them).
	OnViolation func()
	// Egress, when set, serves an egress proxy to each episode whose
	// signed policy grants egress (nil: none is served).
	Egress *EgressConfig
	// PolicyKeys is policy_keys: a spec's signed policy must verify
	// against one of them. Empty, every start is refused (and kernel start
	// contains every recorded episode, whose policy no longer verifies).
	PolicyKeys policy.Keys
	// LiveKeys, when set, replaces PolicyKeys: policy_keys plus the keys
	// registered while the kernel runs (autonomic key add).
	LiveKeys *policy.LiveKeys
	// Ceiling is the regulator's current class ceiling (nil: no cap).
	Ceiling func() authority.Class
	// Governor runs the episodes' fast and slow loops; the broker must
	// have been built on it (its Trajectory, CheckLease, Verify and
	// wrapped adapters), so it is built first and handed to both.
	Governor *governor.Governor
	// Regulator, when set, is the kernel's live system regulator: its
	// level caps every lease minted (new and repair) and, through the
	// governor, the class the commit check lets through (nil: act).
	Regulator *regulator.Live
	// EffectConcurrency is effect_concurrency: requests each episode's
	// broker server serves at once; beyond it a worker is answered
	// effect_broker_saturated (default: the broker server's, 8).
	EffectConcurrency int
	// AuthorityInterval is how often an episode's authority child renews
	// ownership and re-reads the episode (default 500 ms).
	AuthorityInterval time.Duration
	// Archives opens the launcher's checkpoint archives for the harvest
	// (a spec's harvest fails without it). HarvestLimits bound what one
	// harvest reads (zero values: workspace's defaults).
	Archives      Archives
	HarvestLimits workspace.Limits
	// Replicas, when set with Archives, keeps every stable checkpoint's
	// archive (at most ReplicaMaxBytes) where each kernel of the database
	// reaches it, so a task whose host was lost resumes from its last
	// stable checkpoint on another host (TakeOver). Nil: a taken-over
	// task runs again whole.
	Replicas        Replicas
	ReplicaMaxBytes int64
	// Layers keeps the setup layers' keys for every kernel of the
	// database (setup.go); a spec naming setup is refused without it.
	// MaxSetupLayers bounds them (0: DefaultMaxSetupLayers).
	Layers         SetupLayers
	MaxSetupLayers int
	// HarvestAdmit is what a git_commit target lets the harvest carry
	// beyond text (its allow_binary), by target id; nil admits nothing more.
	HarvestAdmit func(targetID string) workspace.Admit
	// WallTime is episode_wall_time, the wall time of an episode whose
	// spec names none (0: unbounded); MaxWallTime is max_episode_wall_time,
	// the most a spec may ask for (0: no maximum; with a maximum, an
	// episode is never unbounded).
	WallTime, MaxWallTime time.Duration
	Git                   string
	Logger                hclog.Logger
}

// Controller drives episodes: their lifecycle, supervision and repair.
type Controller struct {
	cfg Config
	log hclog.Logger

	// feat is what Domains promises, read once: without checkpoints
	// nothing is checkpointed and nothing is repaired.
	feat domain.Features
	// gov runs the fast and slow loops: one trajectory record per episode.
	gov *governor.Governor

	mu       sync.Mutex
	episodes map[uuid.UUID]*Episode
	// ended hears of each episode this controller stops driving (OnEnd).
	ended func(uuid.UUID)
	// layers: the setup layers this kernel makes, holds and reads.
	layers layers
}

// OnEnd has f told of each episode this controller stops driving, once its
// end is recorded in the store (or its start failed): the queue ends its
// task and fills the slot now rather than at its next tick.
func (k *Controller) OnEnd(f func(uuid.UUID)) {
	k.mu.Lock()
	k.ended = f
	k.mu.Unlock()
}

// New returns a controller. The broker must have reconciled (Recover does
// it) before episodes start.
func New(cfg Config) (*Controller, error) {
	if cfg.Store == nil || cfg.Broker == nil || cfg.Domains == nil || cfg.Governor == nil {
		return nil, errors.New("episode: Store, Broker, Domains and Governor are required")
	}
	feat := cfg.Domains.Features()
	if !filepath.IsAbs(cfg.WorkspacesRoot) || !filepath.IsAbs(cfg.SocketsRoot) || (feat.Isolated && cfg.CgroupParent == "") {
		return nil, errors.New("episode: WorkspacesRoot, SocketsRoot and CgroupParent are required")
	}
	if cfg.WallTime < 0 || cfg.MaxWallTime < 0 || (cfg.MaxWallTime > 0 && cfg.WallTime > cfg.MaxWallTime) {
		return nil, errors.New("episode: WallTime and MaxWallTime must be non-negative, WallTime at most MaxWallTime")
	}
	if cfg.AuthorityInterval <= 0 {
		cfg.AuthorityInterval = 500 * time.Millisecond
	}
	if cfg.RelayMemory == nil {
		cfg.RelayMemory = relay.NewMemory(relay.DefaultMemory)
	}
	if cfg.Ceiling == nil {
		cfg.Ceiling = func() authority.Class { return authority.MaxClass }
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	k := &Controller{cfg: cfg, log: cfg.Logger, feat: feat, gov: cfg.Governor, episodes: map[uuid.UUID]*Episode{}}
	if !feat.Isolated {
		k.log.Warn("UNSAFE_LOCAL: episode workers run with NO isolation; every domain is labelled unsafe_local in the ledger",
			"backend", feat.Backend)
	}
	if !feat.Checkpoints {
		k.log.Warn("the domain backend cannot checkpoint: episodes run without checkpoints, and a violation or failure contains them instead of repairing",
			"backend", feat.Backend)
	}
	return k, nil
}

// ceiling is the class ceiling for every lease minted now: the configured
// ceiling under the regulator's level.
func (k *Controller) ceiling() authority.Class {
	return min(k.cfg.Ceiling(), k.cfg.Regulator.Ceiling())
}

func (k *Controller) launcherID(ep uuid.UUID, gen int) string { return fmt.Sprintf("%s-g%d", ep, gen) }

func (k *Controller) socketPath(ep uuid.UUID) string {
	return filepath.Join(k.cfg.SocketsRoot, ep.String()+".sock")
}

func (k *Controller) mint(spec Spec) (*policy.Policy, authority.Capability, error) {
	pol, envelope, _, err := spec.validate(k.policyKeys())
	if err != nil {
		return nil, authority.Capability{}, err
	}
	if err := k.checkServices(spec); err != nil {
		return nil, authority.Capability{}, err
	}
	if k.cfg.MaxWallTime > 0 && spec.WallTime > k.cfg.MaxWallTime {
		return nil, authority.Capability{}, protocol.Errorf(protocol.CodeInvalidField, "wall_time is above the kernel's maximum (%s)", k.cfg.MaxWallTime)
	}
	if spec.Setup != nil && (!k.feat.Checkpoints || k.cfg.Layers == nil) {
		// The layer is a checkpoint archive the store keys.
		return nil, authority.Capability{}, protocol.Errorf(protocol.CodeInvalidField, "setup needs a backend that checkpoints and a store that keeps setup layers")
	}
	ceiling := min(k.ceiling(), spec.RequestedCeiling)
	if spec.RequestedCeiling == 0 {
		ceiling = k.ceiling()
	}
	return pol, authority.Mint(pol.Capability, envelope, ceiling), nil
}

// Admit checks spec as Start does before it touches anything — its
// policy verifies, its services and wall time are within the kernel's
// bounds — and returns what its episode may use at most, which a queued
// task reserves: its policy's inference budget (the relay's hard cap: no
// inference section, no model call), its wall time (unbounded is reserved
// as a day, never as zero) and its egress proxy's byte cap.
func (k *Controller) Admit(spec Spec) (store.Reserve, error) {
	pol, _, err := k.mint(spec)
	if err != nil {
		return store.Reserve{}, fmt.Errorf("episode: spec: %w", err)
	}
	r := store.Reserve{WallMS: k.wallTime(spec).Milliseconds()}
	if r.WallMS <= 0 {
		r.WallMS = (24 * time.Hour).Milliseconds()
	}
	if inf := pol.Document.Inference; inf != nil {
		r.SpendMicroUSD, r.Tokens = inf.MaxSpendMicroUSD, inf.MaxTokens
	}
	// Its egress proxy's byte cap, as the episode would be served it
	// (none served: no byte can be fetched).
	if eg := k.cfg.Egress; eg != nil {
		c, ok, err := egress.ConfigFor(eg.Operator, pol, uuid.Nil, nil, nil)
		if err != nil {
			return store.Reserve{}, err
		}
		if ok {
			r.EgressBytes = c.MaxBytes
		}
	}
	return r, nil
}

// Start creates an episode at epoch 1 with a lease within its envelope,
// prepares its workspace at the base OID, binds its broker socket and runs
// its worker in a new domain, restored from the pristine base checkpoint
// when the backend can checkpoint. It returns once the domain runs.
func (k *Controller) Start(ctx context.Context, spec Spec) (*Episode, error) {
	// Refused specs (an unsigned or wrongly signed policy among them)
	// return here, before the store or the launcher is touched.
	pol, cap, err := k.mint(spec)
	if err != nil {
		return nil, fmt.Errorf("episode: spec: %w", err)
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	st := k.cfg.Store
	rec, err := st.CreateEpisode(ctx, store.NewEpisode{Spec: raw, PolicyVersion: pol.Version})
	if err != nil {
		return nil, err
	}
	e := k.newEpisode(rec.ID, spec)
	e.epoch, e.started = rec.Epoch, rec.CreatedAt
	if err := e.move(Starting); err != nil {
		return nil, err
	}
	fail := func(err error) (*Episode, error) {
		e.cleanupStart()
		// Best effort: the store may be the thing that failed.
		_, _ = st.EndEpisode(context.WithoutCancel(ctx), store.EndEpisode{EpisodeID: e.id, Epoch: e.epoch, State: store.EpisodeAborted,
			Reason: "start failed"})
		e.mu.Lock()
		_ = e.moveLocked(Aborted, "start failed") // starting → aborted
		e.mu.Unlock()
		return nil, err
	}
	if err := e.grant(ctx, cap); err != nil {
		return fail(err)
	}
	if _, err := workspace.Prepare(ctx, workspace.Clone{Repo: spec.Repo, BaseOID: spec.BaseOID, Root: k.cfg.WorkspacesRoot,
		ID: e.id.String(), UID: k.cfg.OwnerUID, GID: k.cfg.OwnerGID, Git: k.cfg.Git}); err != nil {
		if errors.Is(err, workspace.ErrInvalid) {
			// The spec's base is not in its repository: the operator's
			// mistake, not the kernel's.
			err = protocol.Errorf(protocol.CodeInvalidField, "%w", err)
		}
		return fail(err)
	}
	e.workspace = true
	dom, gen, err := st.CreateDomain(ctx, store.NewDomain{EpisodeID: e.id, Epoch: e.epoch, UnsafeLocal: !k.feat.Isolated})
	if err != nil {
		return fail(err)
	}
	e.domainID, e.gen = dom.ID, gen.Generation
	if err := e.run(ctx, ""); err != nil {
		return fail(err)
	}
	return e, nil
}

// Episode returns a live episode this controller drives.
func (k *Controller) Episode(id uuid.UUID) (*Episode, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.episodes[id]
	return e, ok
}

func (k *Controller) newEpisode(id uuid.UUID, spec Spec) *Episode {
	e := &Episode{k: k, id: id, spec: spec, state: Pending,
		contain: make(chan containment, 1), exits: make(chan WorkerExit, 16), digests: map[uuid.UUID]string{},
		log: k.log.With("episode", id)}
	watched := governor.Episode{ID: id, Intent: spec.OriginIntent, Epoch: e.currentEpoch, Lease: e.currentLease,
		Contain: e.containAt, VerifyEgress: e.verifyEgress, VerifyLayer: e.verifyLayer, Logger: e.log}
	// The semantic sensors read the policy's scope; a spec whose policy no
	// longer verifies has none (and Recover contains it).
	if pol, _, _, err := spec.validate(k.policyKeys()); err == nil {
		watched.Scope = pol.Document.SemanticScope()
		e.pol = pol
		watched.MaxRisk = pol.Document.Semantic.MaxRisk
	}
	e.traj = k.gov.Open(watched)
	k.mu.Lock()
	k.episodes[id] = e
	k.mu.Unlock()
	return e
}

// wallTime is the wall time an episode of spec gets (0: unbounded).
func (k *Controller) wallTime(spec Spec) time.Duration {
	w := spec.WallTime
	if w == 0 {
		w = k.cfg.WallTime
	}
	if m := k.cfg.MaxWallTime; m > 0 && (w == 0 || w > m) {
		w = m
	}
	return w
}

// Drain waits, until ctx ends, for the episodes whose end is recorded to
// let go of what they hold on this host — their checkpoint archives in
// the launcher's store, their workspace and sockets — and reports whether
// every one did. A kernel stopping (SIGTERM) right after an episode ended
// calls it before it exits: nothing drives an ended episode again, so an
// archive it still held would stay in the store for good (and keep an
// evicted setup layer there). Episodes still running are left as they
// are: the next kernel recovers them.
func (k *Controller) Drain(ctx context.Context) bool {
	for {
		settling := 0
		for _, e := range k.driven() {
			// Every end this controller records goes through recordEnd,
			// so closing covers the recorded ones too.
			e.mu.Lock()
			if e.closing {
				settling++
			}
			e.mu.Unlock()
		}
		if settling == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			k.log.Warn("stopping before every ended episode let go of its host objects; their archives stay in the launcher's store", "episodes", settling)
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// driven are the episodes this controller drives now.
func (k *Controller) driven() []*Episode {
	k.mu.Lock()
	defer k.mu.Unlock()
	eps := make([]*Episode, 0, len(k.episodes))
	for _, e := range k.episodes {
		eps = append(eps, e)
	}
	return eps
}

func (k *Controller) forget(id uuid.UUID) {
	k.mu.Lock()
	delete(k.episodes, id)
	ended := k.ended
	k.mu.Unlock()
	k.gov.Close(id)
	if ended != nil {
		ended(id)
	}
}

// policyKeys is the key set a policy verifies against now.
func (k *Controller) policyKeys() policy.Keys {
	if k.cfg.LiveKeys != nil {
		return k.cfg.LiveKeys.Keys()
	}
	return k.cfg.PolicyKeys
}
