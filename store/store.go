package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/autonomic-kernel/autonomic/store/ledger"
	"github.com/google/uuid"
)

// Store is what the kernel and the broker hold authority through. Every
// method is one database transaction; none returns cached state.
type Store interface {
	CreateEpisode(ctx context.Context, req NewEpisode) (Episode, error)
	Episode(ctx context.Context, id uuid.UUID) (Episode, error)
	ActiveEpisodes(ctx context.Context) ([]Episode, error)
	EndEpisode(ctx context.Context, req EndEpisode) (Episode, error)
	SetPolicyVersion(ctx context.Context, episodeID uuid.UUID, epoch, version int64) (Episode, error)

	AcquireOwnership(ctx context.Context, episodeID uuid.UUID) (Ownership, error)
	ReleaseOwnership(ctx context.Context, episodeID uuid.UUID) error

	AdvanceEpoch(ctx context.Context, req AdvanceEpoch) (EpochAdvance, error)
	Lineage(ctx context.Context, episodeID uuid.UUID) ([]Lineage, error)

	GrantLease(ctx context.Context, req LeaseGrant) (Lease, error)
	RevokeLease(ctx context.Context, leaseID uuid.UUID, reason string) (Lease, error)
	Lease(ctx context.Context, id uuid.UUID) (Lease, error)
	LeaseInEpisode(ctx context.Context, episodeID, leaseID uuid.UUID) (Episode, Lease, error)

	CreateDomain(ctx context.Context, req NewDomain) (Domain, Generation, error)
	DestroyGeneration(ctx context.Context, domainID uuid.UUID, generation int) (Generation, error)
	NewGeneration(ctx context.Context, req NewGeneration) (Generation, error)
	Generations(ctx context.Context, episodeID uuid.UUID) ([]Generation, error)

	RecordCheckpoint(ctx context.Context, req NewCheckpoint) (Checkpoint, error)
	MarkCheckpointStable(ctx context.Context, checkpointID uuid.UUID) (Checkpoint, error)
	LatestStableCheckpoint(ctx context.Context, episodeID uuid.UUID) (Checkpoint, error)

	ProposeEffect(ctx context.Context, req Proposal) (Effect, error)
	PrepareEffect(ctx context.Context, req Prepare) (Effect, error)
	Evaluate(ctx context.Context, req Evaluation) (Effect, error)
	EvaluateInEpisode(ctx context.Context, episodeID, effectID uuid.UUID, epoch int64, plan func(Effect) (EvaluationPlan, error)) (Effect, error)
	ReviseEffect(ctx context.Context, req Revision) (Effect, error)
	Transition(ctx context.Context, req Transition) (Effect, error)
	Effect(ctx context.Context, id uuid.UUID) (Effect, error)
	EffectInEpisode(ctx context.Context, episodeID, effectID uuid.UUID) (Effect, int64, error)
	RecordDecision(ctx context.Context, req NewDecision) (Decision, error)
	Decisions(ctx context.Context, effectID uuid.UUID) ([]Decision, error)

	ResolveAction(ctx context.Context, r ActionResolution) (Action, Effect, error)
	SnoozeAction(ctx context.Context, id uuid.UUID, d time.Duration) (Action, error)
	DismissAction(ctx context.Context, id uuid.UUID, feedback string) (Action, error)
	Action(ctx context.Context, id uuid.UUID) (Action, error)
	ActionFor(ctx context.Context, effectID uuid.UUID, revision int, epoch int64) (Action, error)
	Actions(ctx context.Context, episode uuid.UUID, all bool) ([]Action, error)

	BeginCommit(ctx context.Context, req CommitRequest, check CommitCheck) (CommitView, error)
	EnterCommit(ctx context.Context, req CommitRequest, check CommitCheck, afterIntent func(CommitView)) (CommitView, error)
	EnterCommitInEpisode(ctx context.Context, episodeID, effectID uuid.UUID, epoch int64,
		plan func(Effect) (CommitRequest, CommitCheck, error), afterIntent func(CommitView)) (CommitView, error)
	// Spend is an episode's durable spend now (a reading; BeginCommit
	// reads it again under its locks, which is what decides).
	Spend(ctx context.Context, episodeID uuid.UUID) (Spend, error)
	FinishCommit(ctx context.Context, req Outcome) (Effect, error)
	Unsettled(ctx context.Context, episodeID uuid.UUID) ([]Effect, error)

	Events(ctx context.Context, episodeID uuid.UUID) ([]ledger.Entry, error)
	VerifyLedger(ctx context.Context, episodeID uuid.UUID) (ledger.Report, error)

	// TaskForEpisode is the queued task an episode runs for, if any.
	TaskForEpisode(ctx context.Context, episodeID uuid.UUID) (Task, bool, error)
	// Instance names the kernel instance this handle acts for.
	Instance() string
}

// EpisodeState is the lifecycle state of an episode.
type EpisodeState string

// Episode states. Only an active episode can be mutated.
const (
	EpisodeActive    EpisodeState = "active"
	EpisodeCompleted EpisodeState = "completed"
	EpisodeContained EpisodeState = "contained"
	EpisodeAborted   EpisodeState = "aborted"
)

// Episode is one episode's authoritative record.
type Episode struct {
	ID uuid.UUID
	// Spec is filled in by Episode only; mutations never read it.
	Spec              json.RawMessage
	State             EpisodeState
	Epoch             int64
	PolicyVersion     int64
	CurrentCheckpoint *uuid.UUID
	Owner             Ownership
	LedgerHead        ledger.Head
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// Ownership is a kernel instance's lease on driving an episode. Token
// increases on every change of owner, so it can fence external systems too.
// Process is the store handle (one per kernel process) that holds it: a
// random UUIDv7 drawn when the handle opens, zero for a lease taken before
// leases named their process.
type Ownership struct {
	EpisodeID  uuid.UUID
	InstanceID string
	Process    uuid.UUID
	Token      int64
	ExpiresAt  time.Time
}

// process is Process as the owner_process column stores it (NULL for zero).
func (o Ownership) process() *uuid.UUID {
	if o.Process == uuid.Nil {
		return nil
	}
	return &o.Process
}

// NewEpisode creates an episode at epoch 1, owned by the calling instance.
type NewEpisode struct {
	ID            uuid.UUID // zero: a new UUIDv7
	Spec          json.RawMessage
	PolicyVersion int64
}

// EndEpisode moves an active episode to a final state.
type EndEpisode struct {
	EpisodeID uuid.UUID
	Epoch     int64
	State     EpisodeState // completed, contained or aborted
	Reason    string
}

// AdvanceEpoch fences an episode's authority.
type AdvanceEpoch struct {
	EpisodeID uuid.UUID
	// FromEpoch must be the current epoch: two components reacting to the
	// same incident must not advance twice.
	FromEpoch int64
	Reason    string
	// CheckpointID, when set, is the checkpoint a repair restores; it is
	// recorded in the lineage.
	CheckpointID *uuid.UUID
}

// EpochAdvance reports what an advance fenced.
type EpochAdvance struct {
	Lineage       Lineage
	RevokedLeases []uuid.UUID
	StaledEffects []uuid.UUID
	// Unsettled are effects of older epochs at or beyond commit_intent,
	// left for reconciliation rather than staled.
	Unsettled []uuid.UUID
}

// Lineage is one recovery step.
type Lineage struct {
	ID           uuid.UUID
	EpisodeID    uuid.UUID
	FromEpoch    int64
	ToEpoch      int64
	CheckpointID *uuid.UUID
	Reason       string
	CreatedAt    time.Time
}

// Proposal creates an effect at revision 1, state proposed.
type Proposal struct {
	EpisodeID     uuid.UUID
	Epoch         int64 // the epoch the request claims; must be current
	LeaseID       uuid.UUID
	Kind          string
	Class         int // 2..4; classes 0 and 1 are never brokered
	TargetID      string
	Target        json.RawMessage
	PayloadDigest string        // "sha256:<64 hex>"
	TTL           time.Duration // 0: the effect does not expire
	// OutsideLease, when set, records that the lease does not grant this
	// kind, target and class, and what it lacks (at most 512 bytes): the
	// effect is proposed only to wait on a human (Effect.AwaitsHuman).
	OutsideLease string
	// Prepare, when set, also prepares the new effect in the same
	// transaction, exactly as PrepareEffect would next (proposed →
	// prepared, version vector captured): the proposal is recorded
	// prepared or not at all.
	Prepare *Trajectory
}

// Trajectory is the homeostat's reading an effect is prepared under; the
// store holds everything else in the version vector authoritatively.
type Trajectory struct {
	Version int64
	Regime  string
}

// Prepare captures the version vector and moves proposed → prepared. The
// store fills in everything it holds authoritatively; the caller supplies
// only the trajectory, which the homeostat owns.
type Prepare struct {
	EffectID          uuid.UUID
	Revision          int
	Epoch             int64
	TrajectoryVersion int64
	TrajectoryRegime  string
}

// Revision replaces an effect's target and payload, bumping its revision
// and returning it to proposed. Decisions bound to the old revision no
// longer apply.
type Revision struct {
	EffectID      uuid.UUID
	FromRevision  int
	Epoch         int64
	Target        json.RawMessage
	PayloadDigest string
	// Prepare, when set, also prepares the new revision in the same
	// transaction (see Proposal.Prepare).
	Prepare *Trajectory
}

// Evaluation walks an effect through evaluation in one transaction, each
// step checked as its own call would check it: prepared → evaluating (as
// Transition) when it is still prepared, then each decision recorded (as
// RecordDecision), then → ready (as Transition) when Ready. Any refusal
// changes nothing.
type Evaluation struct {
	EffectID uuid.UUID
	Revision int
	Epoch    int64
	// Decisions must name this evaluation's effect, revision and epoch.
	// With Ready, every one must allow.
	Decisions []NewDecision
	Ready     bool
}

// Transition is a generic state change (evaluating, ready, committing,
// aborted, expired, …) checked against the table.
type Transition struct {
	EffectID uuid.UUID
	Revision int
	Epoch    int64
	To       EffectState
	Reason   string
}

// VersionVector is what the broker captured at prepare and compares at
// commit (ARCHITECTURE §5).
type VersionVector struct {
	EpisodeID         uuid.UUID  `json:"episode_id"`
	Epoch             int64      `json:"epoch"`
	PolicyVersion     int64      `json:"policy_version"`
	SnapshotAncestry  *uuid.UUID `json:"snapshot_ancestry"`
	TrajectoryVersion int64      `json:"trajectory_version"`
	TrajectoryRegime  string     `json:"trajectory_regime"`
	LeaseID           uuid.UUID  `json:"lease_id"`
	EffectRevision    int        `json:"effect_revision"`
}

// Effect is a brokered effect's authoritative record at its current
// revision.
type Effect struct {
	ID             uuid.UUID
	EpisodeID      uuid.UUID
	LeaseID        uuid.UUID
	Kind           string
	Class          int
	State          EffectState
	Revision       int
	Epoch          int64
	TargetID       string
	Target         json.RawMessage
	PayloadDigest  string
	VersionVector  *VersionVector
	ExpiresAt      *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CommitIntentAt *time.Time
	OutcomeAt      *time.Time
	Receipt        json.RawMessage
	// OutsideLease, when set, is what the episode's lease lacks for this
	// effect (Proposal.OutsideLease): it waits on a human whatever its
	// class, and only its approved Action lifts the grant.
	OutsideLease string
}

// AwaitsHuman says whether e crosses the horizon only with a human's
// approval of its exact revision: a class 4 effect, or one outside its
// lease.
func (e Effect) AwaitsHuman() bool { return e.Class == 4 || e.OutsideLease != "" }

// Decision kinds and verdicts.
const (
	DecisionSemantic     = "semantic"
	DecisionVerification = "verification"
	DecisionHuman        = "human"
	VerdictAllow         = "allow"
	VerdictDeny          = "deny"
)

// NewDecision binds a decision to an effect's exact revision and epoch.
// Signature verification is the caller's job; the store keeps the bytes.
type NewDecision struct {
	EffectID  uuid.UUID
	Revision  int
	Epoch     int64
	Kind      string
	Verdict   string
	Body      json.RawMessage
	KeyID     string
	Signature []byte
}

// Decision is a recorded decision.
type Decision struct {
	ID        uuid.UUID
	EffectID  uuid.UUID
	Revision  int
	Epoch     int64
	Kind      string
	Verdict   string
	Body      json.RawMessage
	KeyID     string
	Signature []byte
	CreatedAt time.Time
}

// CommitRequest names the effect revision to commit and the epoch the
// request claims.
type CommitRequest struct {
	EffectID uuid.UUID
	Revision int
	Epoch    int64
	// Bytes is what this commit spends of the episode's byte budget (the
	// payload's size); recorded with commit_intent (see Spend).
	Bytes int64
}

// CommitView is what BeginCommit re-read under its locks: everything the
// broker needs for the nine commit checks.
type CommitView struct {
	Episode Episode
	Effect  Effect
	Lease   Lease
	// Decisions bound to exactly this effect revision and epoch.
	Decisions []Decision
	// Action, for a class 4 effect, is the Action opened for exactly this
	// revision and epoch (nil when there is none).
	Action *Action
	// Now is the database's clock inside the transaction.
	Now time.Time
	// Spent is the episode's durable spend before this commit, read
	// under the episode's lock.
	Spent Spend
}

// CommitCheck runs inside BeginCommit's transaction, with the episode,
// effect and lease rows locked, after the store's own checks have passed.
// It performs the checks only the broker can (policy compatibility, regime,
// decision sufficiency, adapter preconditions). It must not act on the
// world and should be quick: it holds the episode's lock. A non-nil error
// aborts the commit; an error outside the catalogue becomes
// stale_authority.
type CommitCheck func(ctx context.Context, v CommitView) error

// Outcome records how a commit ended (or how reconciliation settled it).
type Outcome struct {
	EffectID uuid.UUID
	State    EffectState // committed, commit_unknown or failed
	Receipt  json.RawMessage
}
