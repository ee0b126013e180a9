package broker

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
)

// Config is the broker's trusted configuration.
type Config struct {
	Store    store.Store
	Payloads *Payloads
	Adapters []Adapter
	// AwaitingHuman, when set, hears of each class 4 effect a worker's
	// evaluate left waiting on its human approval (its Action open): the
	// episode controller parks the episode until the Action is answered.
	// It runs before the worker is answered, so a domain it freezes is
	// frozen before its worker could poll.
	AwaitingHuman func(e store.Effect)
	// DecisionKeys verify class 4 human approvals, by key id.
	DecisionKeys map[string]ed25519.PublicKey
	// EscalateOutsideLease: a proposal the episode's lease does not grant
	// (kind, target or class) is recorded to wait on a human — an Action
	// naming it and what the lease lacks — instead of being refused. Only
	// that approved Action lifts the grant, for that one revision; the
	// lease's ceiling, paths and budgets still hold at the commit. Off, the
	// lease is a hard wall and such a proposal is forbidden at prepare.
	EscalateOutsideLease bool
	// Trajectory reports the homeostat's current trajectory version and
	// regime for an episode (default: version 1, "stable").
	Trajectory func(ctx context.Context, episodeID uuid.UUID) (int64, string)
	// RegimeMaxClass is the highest effect class each regime permits
	// (commit check 6). A regime not listed permits nothing.
	RegimeMaxClass map[string]int
	// PolicyCompatible declares a current policy version compatible with
	// the one an effect was prepared under (commit check 4; default:
	// only equal versions are).
	PolicyCompatible func(prepared, current int64) bool
	// Verifier, when set, is the slow verification of class 3 and 4
	// effects; its verdict is recorded as a decision bound to the revision
	// and required at commit.
	Verifier func(ctx context.Context, e store.Effect, payload []byte) (verdict string, body json.RawMessage, err error)
	// LeaseCheck is the whole-lease check of the commit horizon (see
	// LeaseCheck); without it nothing commits.
	LeaseCheck LeaseCheck
	// EffectTTL bounds how long an effect may take to commit (0: none).
	EffectTTL time.Duration
	// Quota bounds what one episode's prepares may cost (quota.go).
	Quota  Quota
	Logger hclog.Logger
	// Hooks are fault-injection points for the crash tests; nil in
	// production.
	Hooks *Hooks
}

// Hooks run at the named points of a commit.
type Hooks struct {
	// AfterIntent runs after commit_intent is recorded (durable only once
	// committing is), before committing is recorded: committing's
	// transaction has begun and holds the episode's lock
	// (store.EnterCommit), so a hook must not wait for that lock.
	AfterIntent func(e store.Effect)
	// BeforeAdapter runs after committing is durable, before the adapter
	// acts.
	BeforeAdapter func(e store.Effect)
	// AfterAdapter runs after the adapter acted, before its outcome is
	// recorded.
	AfterAdapter func(e store.Effect, r Result)
}

// DefaultRegimeMaxClass: contraction is fast — an uncertain trajectory may
// still observe and mutate authoritatively, a drifting one only observe,
// beyond that nothing crosses the horizon.
func DefaultRegimeMaxClass() map[string]int {
	return map[string]int{"stable": 4, "uncertain": 3, "drifting": 2}
}

// Broker walks effects across the commit horizon.
type Broker struct {
	cfg        Config
	adapters   map[string]Adapter
	log        hclog.Logger
	reconciled atomic.Bool
	// saturated counts connections refused as effect_broker_saturated by
	// every Server on this broker (see Saturations).
	saturated atomic.Uint64
	quotas    quotas
}

// New returns a broker. It admits no work until Reconcile has settled every
// unsettled effect once.
func New(cfg Config) (*Broker, error) {
	if cfg.Store == nil || cfg.Payloads == nil {
		return nil, errors.New("broker: Store and Payloads are required")
	}
	if cfg.Trajectory == nil {
		cfg.Trajectory = func(context.Context, uuid.UUID) (int64, string) { return 1, "stable" }
	}
	if cfg.RegimeMaxClass == nil {
		cfg.RegimeMaxClass = DefaultRegimeMaxClass()
	}
	if cfg.PolicyCompatible == nil {
		cfg.PolicyCompatible = func(p, c int64) bool { return p == c }
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	b := &Broker{cfg: cfg, adapters: map[string]Adapter{}, log: cfg.Logger}
	for _, a := range cfg.Adapters {
		if _, dup := b.adapters[a.Kind()]; dup {
			return nil, fmt.Errorf("broker: two adapters for kind %s", a.Kind())
		}
		b.adapters[a.Kind()] = a
	}
	return b, nil
}

// Capabilities is the broker's reading of a lease's capability document:
// the kinds, targets and classes the lease grants.
type Capabilities struct {
	Effects []Capability `json:"effects"`
}

// Capability grants one kind on one target ("*": any target) up to a class.
type Capability struct {
	Kind     string `json:"kind"`
	TargetID string `json:"target_id"`
	MaxClass int    `json:"max_class"`
}

// grants reports whether the lease document raw grants kind on target at
// class; err only when the document is unreadable.
func grants(raw json.RawMessage, kind, target string, class int) (bool, error) {
	var c Capabilities
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, protocol.Errorf(protocol.CodeForbidden, "lease capabilities unreadable")
	}
	for _, g := range c.Effects {
		if g.Kind == kind && (g.TargetID == target || g.TargetID == "*") && class <= g.MaxClass {
			return true, nil
		}
	}
	return false, nil
}

// noGrant is what a lease lacks for kind on target at class: the refusal,
// or, under EscalateOutsideLease, the effect's outside_lease.
func noGrant(kind, target string, class int) string {
	return fmt.Sprintf("no grant of %s on %s at class %d", kind, target, class)
}

// Handle answers one admitted request from the worker of episodeID. It is
// the dispatch table of the worker protocol; every error it returns is
// reduced to a catalogue code on the wire.
func (b *Broker) Handle(ctx context.Context, episodeID uuid.UUID, req *protocol.WorkerRequest) *protocol.WorkerResponse {
	resp := &protocol.WorkerResponse{Protocol: protocol.WorkerVersion, RequestID: req.RequestID}
	res, err := b.handle(ctx, episodeID, req)
	if err != nil {
		b.log.Debug("request refused", "action", req.Action, "error", err)
		resp.Error = protocol.AsWire(err)
		return resp
	}
	resp.OK, resp.Result = true, res
	return resp
}

func (b *Broker) handle(ctx context.Context, episodeID uuid.UUID, req *protocol.WorkerRequest) (*protocol.EffectResult, error) {
	if !b.reconciled.Load() {
		return nil, protocol.Errorf(protocol.CodeAuthorityUnavailable, "reconciliation has not completed")
	}
	if req.Action == protocol.WorkerPrepare {
		e, err := b.Prepare(ctx, episodeID, req)
		if err != nil {
			return nil, err
		}
		return result(e), nil
	}
	id, err := uuid.Parse(req.EffectID)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "effect_id")
	}
	if req.Action == protocol.WorkerEvaluate {
		// The ownership check and the evaluation in one transaction,
		// unless the effect needs the slow verifier.
		e, err := b.cfg.Store.EvaluateInEpisode(ctx, episodeID, id, req.Epoch, func(e store.Effect) (store.EvaluationPlan, error) {
			return b.planEvaluation(e, req.Revision, req.Epoch, req.Approval)
		})
		if !errors.Is(err, errSlowEvaluation) {
			if err != nil {
				return nil, err
			}
			b.awaiting(e)
			return result(e), nil
		}
	}
	if req.Action == protocol.WorkerCommit {
		// The ownership check and commit_intent in one transaction,
		// unless the effect's adapter reports touches (commitInEpisode).
		e, err := b.commitInEpisode(ctx, episodeID, id, req.Revision, req.Epoch)
		var slow *slowCommit
		if !errors.As(err, &slow) {
			if err != nil {
				return nil, err
			}
			return result(e), nil
		}
		// The effect as read under the locks, its ownership checked:
		// as good as own's read.
		if e, err = b.Commit(ctx, slow.e, req.Revision, req.Epoch); err != nil {
			return nil, err
		}
		return result(e), nil
	}
	e, err := b.own(ctx, episodeID, id, req.Epoch)
	if err != nil {
		return nil, err
	}
	switch req.Action {
	case protocol.WorkerEvaluate, protocol.WorkerAbort:
		if req.Revision != e.Revision {
			return nil, protocol.Errorf(protocol.CodeStaleAuthority, "revision %d superseded by %d", req.Revision, e.Revision)
		}
	}
	switch req.Action {
	case protocol.WorkerEvaluate:
		if e, err = b.Evaluate(ctx, e, req.Revision, req.Epoch, req.Approval); err == nil {
			b.awaiting(e)
		}
	case protocol.WorkerAbort:
		e, err = b.cfg.Store.Transition(ctx, store.Transition{EffectID: e.ID, Revision: req.Revision, Epoch: req.Epoch,
			To: store.Aborted, Reason: "worker aborted"})
	case protocol.WorkerStatus:
	case protocol.WorkerFetchResponse:
		return b.fetch(e, req.Offset, req.Limit)
	default:
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "%q", req.Action)
	}
	if err != nil {
		return nil, err
	}
	return result(e), nil
}

// awaiting tells AwaitingHuman of a class 4 effect left waiting on its
// human approval.
func (b *Broker) awaiting(e store.Effect) {
	if b.cfg.AwaitingHuman != nil && e.AwaitsHuman() && e.State == store.Evaluating {
		b.cfg.AwaitingHuman(e)
	}
}

// own reads an effect and refuses it unless it belongs to episodeID and the
// request's epoch is current: a worker can neither see nor steer another
// episode's effects, and a fenced worker learns only that it is fenced.
func (b *Broker) own(ctx context.Context, episodeID, id uuid.UUID, epoch int64) (store.Effect, error) {
	e, current, err := b.cfg.Store.EffectInEpisode(ctx, episodeID, id)
	if current != 0 && epoch != current {
		return store.Effect{}, protocol.Errorf(protocol.CodeStaleRequestEpoch, "request epoch %d, current %d", epoch, current)
	}
	if err != nil {
		return store.Effect{}, err
	}
	return e, nil
}

func result(e store.Effect) *protocol.EffectResult {
	r := &protocol.EffectResult{ID: e.ID.String(), EpisodeID: e.EpisodeID.String(), Epoch: e.Epoch, Revision: e.Revision,
		Kind: e.Kind, Class: protocol.ClassName(e.Class), TargetID: e.TargetID, State: string(e.State), PayloadDigest: e.PayloadDigest}
	if len(e.Receipt) > 0 && string(e.Receipt) != "null" {
		r.Receipt = e.Receipt
	}
	return r
}

func (b *Broker) adapter(kind, target string) (Adapter, int, error) {
	a, ok := b.adapters[kind]
	if !ok {
		return nil, 0, protocol.Errorf(protocol.CodeForbidden, "no adapter for kind %q", kind)
	}
	class, err := a.Class(target)
	if err != nil {
		return nil, 0, err
	}
	return a, class, nil
}

// Prepare proposes (or re-proposes) an effect and captures its version
// vector. It is fenced first: the episode's epoch, the lease's validity and
// its grant of this kind, target and class, and the episode's quotas are
// checked before the adapter looks at the request, so a refused prepare
// applies no patch, stores no payload and writes no row. Nothing reaches
// the store unless the adapter accepted the request against trusted
// configuration; the store then checks epoch and lease again, atomically
// (a prepare refused there, by a race with the fence, leaves a payload no
// effect holds, which the sweep removes).
func (b *Broker) Prepare(ctx context.Context, episodeID uuid.UUID, req *protocol.WorkerRequest) (store.Effect, error) {
	payload, err := req.Payload()
	if err != nil {
		return store.Effect{}, err
	}
	return b.prepare(ctx, episodeID, req, payload)
}

// MaxPayload bounds every stored effect payload. A worker's frame carries
// at most protocol.MaxWorkerPayload; a proposal the kernel makes for an
// episode (the harvest's patch: a regenerated lock file is larger than a
// frame) up to this, and the lease's bytes_per_effect still decides.
const MaxPayload = 4 << 20

// PrepareKernel is Prepare for a proposal the kernel makes on an
// episode's behalf, under its epoch and lease like a worker's: the payload
// (at most MaxPayload) is given here, not carried in the request.
func (b *Broker) PrepareKernel(ctx context.Context, episodeID uuid.UUID, req *protocol.WorkerRequest, payload []byte) (store.Effect, error) {
	if req.PayloadB64 != "" {
		return store.Effect{}, protocol.Errorf(protocol.CodeInvalidField, "payload_b64: the payload is given apart")
	}
	if len(payload) > MaxPayload {
		return store.Effect{}, protocol.Errorf(protocol.CodeLimitExceeded, "payload of %d bytes, over %d", len(payload), MaxPayload)
	}
	return b.prepare(ctx, episodeID, req, payload)
}

func (b *Broker) prepare(ctx context.Context, episodeID uuid.UUID, req *protocol.WorkerRequest, payload []byte) (store.Effect, error) {
	a, class, err := b.adapter(req.Kind, req.TargetID)
	if err != nil {
		return store.Effect{}, err
	}
	lease, outside, err := b.fence(ctx, episodeID, req, class)
	if err != nil {
		return store.Effect{}, err
	}
	var revise uuid.UUID
	if req.EffectID != "" {
		if revise, err = uuid.Parse(req.EffectID); err != nil {
			return store.Effect{}, protocol.Errorf(protocol.CodeInvalidField, "effect_id")
		}
		old, err := b.own(ctx, episodeID, revise, req.Epoch)
		if err != nil {
			return store.Effect{}, err
		}
		if old.Kind != req.Kind || old.TargetID != req.TargetID || old.LeaseID != lease.ID {
			return store.Effect{}, protocol.Errorf(protocol.CodeInvalidField, "a revision keeps kind, target_id and lease_id")
		}
		if (old.OutsideLease != "") != (outside != "") {
			// The lease is the same, so this kernel's reading of it differs
			// from the one that proposed the effect: ask nothing new.
			return store.Effect{}, protocol.Errorf(protocol.CodeForbidden, "a revision keeps the effect within, or outside, its lease")
		}
	}
	digest := Digest(payload)
	release, err := b.quotas.admit(ctx, b, episodeID, digest, int64(len(payload)))
	if err != nil {
		return store.Effect{}, err
	}
	stored := false
	defer func() { release(stored) }()
	ar := Request{TargetID: req.TargetID, Target: req.Target, Payload: payload, PayloadDigest: digest, Epoch: req.Epoch,
		MaxBytes: leaseBytesPerEffect(lease.Capabilities)}
	if err := a.Validate(ctx, ar); err != nil {
		return store.Effect{}, err
	}
	if err := diskReserve(b.cfg.Payloads.dir, int64(len(payload)), b.cfg.Quota.DiskReserveBytes); err != nil {
		return store.Effect{}, err
	}
	// The payload is stored (written, fsynced, renamed, its directory
	// fsynced) while the proposal's transaction runs. The two need no
	// order: no worker can name the effect before this call answers, and
	// every later read of the payload verifies it against the digest the
	// effect records (Payloads.Get), so an effect whose payload is missing
	// can never commit. Prepared is answered only once both are done.
	put := make(chan error, 1)
	go func() {
		_, err := b.cfg.Payloads.Put(payload)
		put <- err
	}()
	// Proposal (or revision) and prepare are one transaction: an effect
	// is recorded prepared, with its version vector, or not at all.
	tv, regime := b.cfg.Trajectory(ctx, episodeID)
	tr := &store.Trajectory{Version: tv, Regime: regime}
	var e store.Effect
	if revise != uuid.Nil {
		e, err = b.cfg.Store.ReviseEffect(ctx, store.Revision{EffectID: revise, FromRevision: req.Revision, Epoch: req.Epoch,
			Target: req.Target, PayloadDigest: digest, Prepare: tr})
	} else {
		e, err = b.cfg.Store.ProposeEffect(ctx, store.Proposal{EpisodeID: episodeID, Epoch: req.Epoch, LeaseID: lease.ID,
			Kind: req.Kind, Class: class, TargetID: req.TargetID, Target: req.Target, PayloadDigest: digest, TTL: b.cfg.EffectTTL,
			OutsideLease: outside, Prepare: tr})
	}
	if perr := <-put; perr != nil {
		if err == nil {
			b.abandon(ctx, e, "payload not stored")
		}
		return store.Effect{}, fmt.Errorf("storing payload: %w", perr)
	}
	stored = true
	return e, err
}

// abandon aborts an effect recorded prepared whose payload could not be
// stored. If that fails too, the effect stays prepared until it expires:
// its commit reads the payload first and finds none.
func (b *Broker) abandon(ctx context.Context, e store.Effect, reason string) {
	if _, err := b.cfg.Store.Transition(ctx, store.Transition{EffectID: e.ID, Revision: e.Revision, Epoch: e.Epoch,
		To: store.Aborted, Reason: reason}); err != nil {
		b.log.Error("effect left prepared without its payload", "effect", e.ID, "error", err)
	}
}

// fence is prepare's first check, read-only: the request's epoch is the
// episode's current one and the episode is active; the lease is the
// episode's, of this epoch, neither revoked nor expired, and grants kind on
// target at class — or, under EscalateOutsideLease, outside names what it
// lacks and the effect will wait on a human.
func (b *Broker) fence(ctx context.Context, episodeID uuid.UUID, req *protocol.WorkerRequest, class int) (store.Lease, string, error) {
	lease, err := b.fenceLease(ctx, episodeID, req)
	if err != nil {
		return store.Lease{}, "", err
	}
	ok, err := grants(lease.Capabilities, req.Kind, req.TargetID, class)
	switch {
	case err != nil:
		return store.Lease{}, "", err
	case ok:
		return lease, "", nil
	case !b.cfg.EscalateOutsideLease:
		return store.Lease{}, "", protocol.Errorf(protocol.CodeForbidden, "lease: %s", noGrant(req.Kind, req.TargetID, class))
	}
	// The target is configured (its adapter gave the class), so the text
	// is the operator's own words.
	return lease, noGrant(req.Kind, req.TargetID, class), nil
}

// fenceLease is fence up to the grant: epoch, episode and lease.
func (b *Broker) fenceLease(ctx context.Context, episodeID uuid.UUID, req *protocol.WorkerRequest) (store.Lease, error) {
	leaseID, err := uuid.Parse(req.LeaseID)
	if err != nil {
		return store.Lease{}, protocol.Errorf(protocol.CodeInvalidField, "lease_id")
	}
	ep, lease, err := b.cfg.Store.LeaseInEpisode(ctx, episodeID, leaseID)
	if err != nil && ep.ID == uuid.Nil {
		return store.Lease{}, err
	}
	if req.Epoch != ep.Epoch {
		return store.Lease{}, protocol.Errorf(protocol.CodeStaleRequestEpoch, "request epoch %d, current %d", req.Epoch, ep.Epoch)
	}
	if ep.State != store.EpisodeActive {
		return store.Lease{}, protocol.Errorf(protocol.CodeStaleAuthority, "episode is %s", ep.State)
	}
	if err != nil {
		return store.Lease{}, err
	}
	switch {
	case lease.EpisodeID != episodeID:
		return store.Lease{}, protocol.Errorf(protocol.CodeNotFound, "lease")
	case lease.RevokedAt != nil:
		return store.Lease{}, protocol.Errorf(protocol.CodeStaleAuthority, "lease revoked")
	case lease.Epoch != ep.Epoch:
		return store.Lease{}, protocol.Errorf(protocol.CodeStaleAuthority, "lease of epoch %d, current %d", lease.Epoch, ep.Epoch)
	case !time.Now().Before(lease.ExpiresAt):
		return store.Lease{}, protocol.Errorf(protocol.CodeStaleAuthority, "lease expired")
	}
	return lease, nil
}

// errSlowEvaluation: the effect's evaluation runs the slow verifier, which
// must not run under the episode's lock (Evaluate). It never reaches a
// worker; it is a catalogue error only so that the store keeps the
// connection it was raised on.
var errSlowEvaluation = protocol.Errorf(protocol.CodeInternal, "evaluation needs the verifier")

// planEvaluation is Evaluate decided under the effect's lock (store.
// EvaluateInEpisode), with the same checks in the same order and the same
// answers, for every effect that needs no slow verifier.
func (b *Broker) planEvaluation(e store.Effect, revision int, epoch int64, approval *protocol.Approval) (store.EvaluationPlan, error) {
	if revision != e.Revision {
		return store.EvaluationPlan{}, protocol.Errorf(protocol.CodeStaleAuthority, "revision %d superseded by %d", revision, e.Revision)
	}
	if e.State == store.Stale {
		return store.EvaluationPlan{}, protocol.Errorf(protocol.CodeStaleAuthority, "revision %d (current %d) in state %s", revision, e.Revision, e.State)
	}
	if e.State != store.Prepared && e.State != store.Evaluating {
		return store.EvaluationPlan{}, protocol.Errorf(protocol.CodeIllegalTransition, "evaluate from %s", e.State)
	}
	if e.State == store.Prepared && b.cfg.Verifier != nil && e.Class >= 3 {
		return store.EvaluationPlan{}, errSlowEvaluation
	}
	pl := store.EvaluationPlan{Evaluation: store.Evaluation{EffectID: e.ID, Revision: revision, Epoch: epoch, Ready: true}}
	if !e.AwaitsHuman() {
		return pl, nil
	}
	switch {
	case approval == nil:
		// Prepared: to evaluating, awaiting its approval. Evaluating:
		// nothing to record.
		pl.Ready = false
	default:
		d, aerr := b.approvalDecision(e, epoch, approval)
		if aerr != nil {
			// The effect still moves to evaluating, then the approval
			// is refused.
			if e.State != store.Prepared {
				return store.EvaluationPlan{}, aerr
			}
			pl.Ready, pl.Then = false, aerr
			return pl, nil
		}
		pl.Decisions = []store.NewDecision{d}
		pl.Ready = approval.Document.Decision == store.VerdictAllow
		if !pl.Ready {
			pl.Then = protocol.Errorf(protocol.CodeForbidden, "a human denied the effect")
		}
	}
	return pl, nil
}

// Evaluate moves a prepared effect to ready once the evaluation its class
// requires is recorded against its exact revision. A class 4 effect stays
// evaluating until an approval that verifies is supplied. What needs no
// slow verifier is one store transaction (store.Evaluation).
func (b *Broker) Evaluate(ctx context.Context, e store.Effect, revision int, epoch int64, approval *protocol.Approval) (store.Effect, error) {
	if revision != e.Revision || e.State == store.Stale {
		return store.Effect{}, protocol.Errorf(protocol.CodeStaleAuthority, "revision %d (current %d) in state %s", revision, e.Revision, e.State)
	}
	if e.State != store.Prepared && e.State != store.Evaluating {
		return store.Effect{}, protocol.Errorf(protocol.CodeIllegalTransition, "evaluate from %s", e.State)
	}
	s := b.cfg.Store
	var err error
	if e.State == store.Prepared && b.cfg.Verifier != nil && e.Class >= 3 {
		// The verifier is slow and may reach the world: it runs between
		// transactions, never under the episode's lock.
		if e, err = s.Transition(ctx, store.Transition{EffectID: e.ID, Revision: revision, Epoch: epoch, To: store.Evaluating}); err != nil {
			return store.Effect{}, err
		}
		payload, err := b.cfg.Payloads.Get(e.PayloadDigest, MaxPayload)
		if err != nil {
			return store.Effect{}, err
		}
		verdict, body, err := b.cfg.Verifier(ctx, e, payload)
		if err != nil {
			return store.Effect{}, err
		}
		if _, err := s.RecordDecision(ctx, store.NewDecision{EffectID: e.ID, Revision: revision, Epoch: epoch,
			Kind: store.DecisionVerification, Verdict: verdict, Body: body}); err != nil {
			return store.Effect{}, err
		}
		if verdict != store.VerdictAllow {
			return store.Effect{}, protocol.Errorf(protocol.CodeForbidden, "verification denied the effect")
		}
	}
	ev := store.Evaluation{EffectID: e.ID, Revision: revision, Epoch: epoch, Ready: true}
	if e.AwaitsHuman() {
		switch {
		case approval == nil && e.State == store.Evaluating:
			return e, nil
		case approval == nil:
			ev.Ready = false
		default:
			d, aerr := b.approvalDecision(e, epoch, approval)
			if aerr != nil {
				// As before the two were one transaction: the effect
				// still moves to evaluating, then the approval is refused.
				if e.State == store.Prepared {
					if _, err := s.Evaluate(ctx, store.Evaluation{EffectID: e.ID, Revision: revision, Epoch: epoch}); err != nil {
						return store.Effect{}, err
					}
				}
				return store.Effect{}, aerr
			}
			ev.Decisions = []store.NewDecision{d}
			ev.Ready = approval.Document.Decision == store.VerdictAllow
		}
	}
	if e, err = s.Evaluate(ctx, ev); err != nil {
		return store.Effect{}, err
	}
	if approval != nil && e.AwaitsHuman() && !ev.Ready {
		return store.Effect{}, protocol.Errorf(protocol.CodeForbidden, "a human denied the effect")
	}
	return e, nil
}

// commitCheck is checks 4, 6, 7 and 9 and the whole lease (grant, class,
// paths, bytes, durable budgets), run inside BeginCommit with episode,
// effect and lease locked; the store ran 1-3, 5 and 8.
func (b *Broker) commitCheck(a Adapter, ar *Request, touches []Touch) store.CommitCheck {
	return func(ctx context.Context, v store.CommitView) error {
		e := v.Effect
		if !b.cfg.PolicyCompatible(e.VersionVector.PolicyVersion, v.Episode.PolicyVersion) {
			return protocol.Errorf(protocol.CodeStaleAuthority, "policy version %d → %d", e.VersionVector.PolicyVersion, v.Episode.PolicyVersion)
		}
		// An effect outside its lease passes here only to meet check 7,
		// which wants its approved Action.
		if ok, err := grants(v.Lease.Capabilities, e.Kind, e.TargetID, e.Class); err != nil {
			return err
		} else if !ok && e.OutsideLease == "" {
			return protocol.Errorf(protocol.CodeForbidden, "lease: %s", noGrant(e.Kind, e.TargetID, e.Class))
		}
		_, regime := b.cfg.Trajectory(ctx, e.EpisodeID)
		if max, ok := b.cfg.RegimeMaxClass[regime]; !ok || e.Class > max {
			return protocol.Errorf(protocol.CodeStaleAuthority, "regime %q does not permit class %d", regime, e.Class)
		}
		if err := b.leaseCheck(ctx, v, touches, int64(len(ar.Payload))); err != nil {
			return err
		}
		if err := b.decisionsSuffice(e, v.Decisions, v.Action); err != nil {
			return err
		}
		return a.Precondition(ctx, *ar)
	}
}

// decisionsSuffice is check 7. The store returns only decisions bound to
// this revision and epoch; a class 4 approval is verified again here, from
// the recorded bytes, so a row written by anything but Evaluate cannot
// authorise a commit. For class 4 it is also the Action's third check:
// the Action opened for this revision was approved by that very decision
// and still names the effect exactly as it stands.
func (b *Broker) decisionsSuffice(e store.Effect, ds []store.Decision, action *store.Action) error {
	verified, approved := false, false
	var approval uuid.UUID
	for _, d := range ds {
		if d.Revision != e.Revision || d.Epoch != e.Epoch {
			return protocol.Errorf(protocol.CodeStaleAuthority, "decision bound to another revision")
		}
		if d.Verdict != store.VerdictAllow {
			return protocol.Errorf(protocol.CodeForbidden, "%s decision denies the effect", d.Kind)
		}
		switch d.Kind {
		case store.DecisionVerification:
			verified = true
		case store.DecisionHuman:
			var doc protocol.ApprovalDocument
			if err := json.Unmarshal(d.Body, &doc); err != nil {
				continue
			}
			a := &protocol.Approval{Document: doc, Signature: base64.StdEncoding.EncodeToString(d.Signature), KeyID: d.KeyID}
			if verifyApproval(b.cfg.DecisionKeys, e, a) == nil && doc.Decision == store.VerdictAllow {
				approved, approval = true, d.ID
			}
		}
	}
	if b.cfg.Verifier != nil && e.Class >= 3 && !verified {
		return protocol.Errorf(protocol.CodeStaleAuthority, "no verification of this revision")
	}
	if e.AwaitsHuman() && !approved {
		return protocol.Errorf(protocol.CodeApprovalRequired, "no verified approval of this revision")
	}
	if e.AwaitsHuman() && (action == nil || action.State != store.ActionApproved || action.DecisionID == nil ||
		*action.DecisionID != approval || !action.Binds(e)) {
		return protocol.Errorf(protocol.CodeApprovalRequired, "no approved action names this exact operation")
	}
	return nil
}

// commitCheckable is what the worker's commit requires of the effect
// before the horizon's checks: the request's revision is the current one,
// and a class 4 effect is not still awaiting its approval.
func commitCheckable(e store.Effect, revision int) error {
	if revision != e.Revision {
		return protocol.Errorf(protocol.CodeStaleAuthority, "revision %d superseded by %d", revision, e.Revision)
	}
	if e.AwaitsHuman() && e.State == store.Evaluating {
		return protocol.Errorf(protocol.CodeApprovalRequired, "the effect awaits its approval")
	}
	return nil
}

// slowCommit: the effect's adapter reports touches, which Commit computes
// before the commit transaction, not under the episode's lock. It carries
// the effect as read under the locks, its ownership and commitCheckable
// checked. It never reaches a worker; it is a catalogue error only so that
// the store keeps the connection it was raised on.
type slowCommit struct {
	error
	e store.Effect
}

func (s *slowCommit) Unwrap() error { return s.error }

// commitInEpisode is the worker's commit: the ownership read (own), the
// effect's checks, the payload read and verified and commit_intent in one
// transaction (store.EnterCommitInEpisode), one round trip fewer than own
// and then Commit; then as Commit. The payload (at most
// MaxPayload) is read and hashed under the episode's lock,
// as the adapter's Precondition reads the target; an adapter that reports
// touches is answered with a slowCommit before anything is read.
func (b *Broker) commitInEpisode(ctx context.Context, episodeID, id uuid.UUID, revision int, epoch int64) (store.Effect, error) {
	var a Adapter
	var ar Request
	view, err := b.cfg.Store.EnterCommitInEpisode(ctx, episodeID, id, epoch, func(e store.Effect) (store.CommitRequest, store.CommitCheck, error) {
		if err := commitCheckable(e, revision); err != nil {
			return store.CommitRequest{}, nil, err
		}
		var err error
		if a, _, err = b.adapter(e.Kind, e.TargetID); err != nil {
			return store.CommitRequest{}, nil, err
		}
		if _, ok := unwrap(a).(Toucher); ok {
			return store.CommitRequest{}, nil, &slowCommit{error: protocol.Errorf(protocol.CodeInternal, "commit needs the touches"), e: e}
		}
		if ar, err = b.request(e); err != nil {
			// Internal, as it reached the worker before: a bare error
			// here would read to the store as a broken connection.
			if pe := (*protocol.Error)(nil); !errors.As(err, &pe) {
				err = protocol.Errorf(protocol.CodeInternal, "payload: %w", err)
			}
			return store.CommitRequest{}, nil, err
		}
		return store.CommitRequest{EffectID: e.ID, Revision: revision, Epoch: epoch, Bytes: int64(len(ar.Payload))},
			b.commitCheck(a, &ar, nil), nil
	}, b.afterIntent())
	if err != nil {
		return store.Effect{}, err
	}
	return b.cross(ctx, a, ar, view.Effect)
}

func (b *Broker) request(e store.Effect) (Request, error) {
	payload, err := b.cfg.Payloads.Get(e.PayloadDigest, MaxPayload)
	if err != nil {
		return Request{}, err
	}
	return Request{EffectID: e.ID, Revision: e.Revision, Epoch: e.Epoch, TargetID: e.TargetID, Target: e.Target,
		Payload: payload, PayloadDigest: e.PayloadDigest}, nil
}

// Commit crosses the horizon: the checks and commit_intent in one store
// transaction, committing recorded in the next, then the adapter, then the
// outcome.
// Committing and the outcome are the two commits that wait for their WAL
// flush; committing's carries commit_intent with it.
func (b *Broker) Commit(ctx context.Context, e store.Effect, revision int, epoch int64) (store.Effect, error) {
	a, _, err := b.adapter(e.Kind, e.TargetID)
	if err != nil {
		return store.Effect{}, err
	}
	ar, err := b.request(e)
	if err != nil {
		return store.Effect{}, err
	}
	touches, err := b.touches(ctx, a, ar)
	if err != nil {
		return store.Effect{}, err
	}
	// commit_intent and committing: two transactions, one round trip
	// apart (store.EnterCommit). An error after commit_intent leaves the
	// effect there; reconciliation aborts it, since the adapter provably
	// never ran.
	view, err := b.cfg.Store.EnterCommit(ctx, store.CommitRequest{EffectID: e.ID, Revision: revision, Epoch: epoch, Bytes: int64(len(ar.Payload))},
		b.commitCheck(a, &ar, touches), b.afterIntent())
	if err != nil {
		return store.Effect{}, err
	}
	return b.cross(ctx, a, ar, view.Effect)
}

func (b *Broker) afterIntent() func(store.CommitView) {
	if h := b.cfg.Hooks; h != nil && h.AfterIntent != nil {
		return func(v store.CommitView) { h.AfterIntent(v.Effect) }
	}
	return nil
}

// cross is the horizon's far side, with committing durable for e: the
// adapter acts and its outcome is recorded.
func (b *Broker) cross(ctx context.Context, a Adapter, ar Request, e store.Effect) (store.Effect, error) {
	// From here on the adapter may act: the outcome must be recorded even if
	// the worker's request is cancelled, so the rest runs on a context that
	// keeps the deadline but not the cancellation of the caller.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitWindow)
	defer cancel()
	if h := b.cfg.Hooks; h != nil && h.BeforeAdapter != nil {
		h.BeforeAdapter(e)
	}
	r := a.Commit(ctx, ar)
	if h := b.cfg.Hooks; h != nil && h.AfterAdapter != nil {
		h.AfterAdapter(e, r)
	}
	return b.record(ctx, e, r)
}

// commitWindow bounds an adapter's commit and the recording of its outcome.
const commitWindow = 2 * time.Minute

// record writes an adapter's outcome and answers the worker with it.
func (b *Broker) record(ctx context.Context, e store.Effect, r Result) (store.Effect, error) {
	state := map[Outcome]store.EffectState{Committed: store.Committed, NotCommitted: store.Failed, Unknown: store.CommitUnknown}[r.Outcome]
	receipt := r.Receipt
	if receipt == nil {
		receipt = map[string]any{}
	}
	if r.Err != nil {
		receipt["error"] = string(protocol.AsWire(r.Err).Code)
	}
	raw, err := json.Marshal(receipt)
	if err != nil {
		return store.Effect{}, err
	}
	out, err := b.cfg.Store.FinishCommit(ctx, store.Outcome{EffectID: e.ID, State: state, Receipt: raw})
	if err != nil {
		b.log.Error("outcome not recorded; reconciliation will settle it", "effect", e.ID, "outcome", r.Outcome.String(), "error", err)
		return store.Effect{}, protocol.Errorf(protocol.CodeCommitUnknown, "recording outcome: %w", err)
	}
	switch r.Outcome {
	case Committed:
		return out, nil
	case NotCommitted:
		if r.Err != nil && protocol.AsWire(r.Err).Code != protocol.CodeInternal {
			return out, r.Err
		}
		return out, protocol.Errorf(protocol.CodeEffectFailed, "adapter did not commit: %v", r.Err)
	}
	return out, protocol.Errorf(protocol.CodeCommitUnknown, "adapter outcome unknown: %v", r.Err)
}

func (b *Broker) fetch(e store.Effect, offset int64, limit int) (*protocol.EffectResult, error) {
	if e.State != store.Committed {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no committed response")
	}
	var rc struct {
		Digest string `json:"response_digest"`
	}
	if err := json.Unmarshal(e.Receipt, &rc); err != nil || rc.Digest == "" {
		return nil, protocol.Errorf(protocol.CodeNotFound, "effect has no response body")
	}
	c, data, err := b.cfg.Payloads.Chunk(rc.Digest, offset, limit)
	if err != nil {
		return nil, err
	}
	c.DataB64 = base64.StdEncoding.EncodeToString(data)
	res := result(e)
	res.Chunk = c
	return res, nil
}

// Settlement is what reconciliation did with one effect.
type Settlement struct {
	EffectID uuid.UUID
	Kind     string
	From, To store.EffectState
	Receipt  map[string]any
}

// Reconcile settles every unsettled effect (of one episode, or of all with
// uuid.Nil) from its adapter's evidence, and must complete once before the
// broker admits work. It takes the ownership lease of each episode it
// settles effects of first. An effect at commit_intent never reached its adapter
// (committing is recorded first) and is aborted; one at committing or
// commit_unknown is settled by the adapter's Reconcile, which never acts.
func (b *Broker) Reconcile(ctx context.Context, episodeID uuid.UUID) ([]Settlement, error) {
	s := b.cfg.Store
	list, err := s.Unsettled(ctx, episodeID)
	if err != nil {
		return nil, err
	}
	var out []Settlement
	var errs []error
	// The lease names the kernel process: a restarted kernel holds none
	// of its predecessor's episodes until it takes them (refused while
	// another live kernel holds one, which then keeps its effects).
	owned := map[uuid.UUID]error{}
	for _, e := range list {
		err, ok := owned[e.EpisodeID]
		if !ok {
			_, err = s.AcquireOwnership(ctx, e.EpisodeID)
			owned[e.EpisodeID] = err
		}
		if err != nil {
			// Another live kernel (on another host) drives the episode:
			// its effects are that kernel's to settle — or, once its
			// lease expires, the taker's or its own restart's. Nothing
			// here may touch them, and they do not keep this kernel
			// from starting.
			if episodeID == uuid.Nil && errors.Is(err, protocol.E(protocol.CodeStaleAuthority)) {
				continue
			}
			errs = append(errs, err)
			continue
		}
		st := Settlement{EffectID: e.ID, Kind: e.Kind, From: e.State, To: e.State}
		switch e.State {
		case store.CommitIntent:
			if _, err := s.Transition(ctx, store.Transition{EffectID: e.ID, Revision: e.Revision, Epoch: e.Epoch,
				To: store.Aborted, Reason: "reconciled: adapter never acted"}); err != nil {
				errs = append(errs, err)
				continue
			}
			st.To = store.Aborted
		case store.Committing, store.CommitUnknown:
			a, _, err := b.adapter(e.Kind, e.TargetID)
			if err != nil {
				// The target (or kind) is no longer configured: nothing
				// here can ask it what happened. Reported and left for an
				// operator as commit_unknown, never a kernel that cannot
				// start (issue 23 §6).
				st.Receipt = map[string]any{"reconciled": true, "target_removed": true}
				if e.State == store.Committing {
					ne, rerr := b.record(ctx, e, Result{Outcome: Unknown, Receipt: st.Receipt,
						Err: protocol.Errorf(protocol.CodeCommitUnknown, "target %s is no longer configured", e.TargetID)})
					if ne.ID == uuid.Nil {
						errs = append(errs, rerr)
						continue
					}
					st.To = ne.State
				}
				out = append(out, st)
				continue
			}
			ar, err := b.request(e)
			if errors.Is(err, protocol.E(protocol.CodeNotFound)) {
				// Prepared by a kernel on another host, whose payload
				// store this one cannot read: the outcome is proven from
				// the target's own evidence, which no adapter's
				// Reconcile takes from the payload.
				ar, err = Request{EffectID: e.ID, Revision: e.Revision, Epoch: e.Epoch, TargetID: e.TargetID, Target: e.Target,
					PayloadDigest: e.PayloadDigest}, nil
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r := a.Reconcile(ctx, ar)
			st.Receipt = r.Receipt
			if r.Outcome == Unknown && e.State == store.CommitUnknown {
				out = append(out, st)
				continue
			}
			if r.Receipt == nil {
				r.Receipt = map[string]any{}
			}
			r.Receipt["reconciled"] = true
			ne, err := b.record(ctx, e, r)
			if ne.ID == uuid.Nil {
				errs = append(errs, err)
				continue
			}
			st.To = ne.State
		}
		out = append(out, st)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("broker: reconciliation incomplete: %w", errors.Join(errs...))
	}
	if episodeID == uuid.Nil {
		b.reconciled.Store(true)
	}
	return out, nil
}

// Settle is an operator's word on an effect whose outcome nothing here
// can find: only an effect in commit_unknown, and only when its adapter
// cannot decide it either — its target is no longer configured, or the
// adapter's reconciliation is still ambiguous. Where the adapter can
// decide, that decides and the operator's word is not taken (it is
// returned as the effect's settled state, with CodeIllegalTransition when
// it contradicts the operator). committed says which way; who (the
// caller's uid) and why go into the receipt the ledger digests.
func (b *Broker) Settle(ctx context.Context, id uuid.UUID, committed bool, uid int64, reason string) (store.Effect, error) {
	s := b.cfg.Store
	e, err := s.Effect(ctx, id)
	if err != nil {
		return store.Effect{}, err
	}
	if e.State != store.CommitUnknown {
		return e, protocol.Errorf(protocol.CodeIllegalTransition, "only a commit_unknown effect is settled by an operator (this one is %s)", e.State)
	}
	if a, _, aerr := b.adapter(e.Kind, e.TargetID); aerr == nil {
		ar, err := b.request(e)
		if err != nil {
			return e, err
		}
		if r := a.Reconcile(ctx, ar); r.Outcome != Unknown {
			if r.Receipt == nil {
				r.Receipt = map[string]any{}
			}
			r.Receipt["reconciled"] = true
			ne, err := b.record(ctx, e, r)
			if ne.ID == uuid.Nil {
				return e, err
			}
			if (r.Outcome == Committed) != committed {
				return ne, protocol.Errorf(protocol.CodeIllegalTransition, "the target says the effect is %s; the operator's word was not taken", ne.State)
			}
			return ne, nil
		}
	}
	outcome := Result{Outcome: NotCommitted, Err: protocol.Errorf(protocol.CodeEffectFailed, "settled by an operator: not committed")}
	if committed {
		outcome = Result{Outcome: Committed}
	}
	outcome.Receipt = map[string]any{"settled_by": "operator", "uid": uid, "reason": reason}
	ne, err := b.record(ctx, e, outcome)
	if ne.ID == uuid.Nil {
		return e, err // not recorded: still commit_unknown
	}
	return ne, nil // record's error only restates a not-committed outcome
}

// Saturations is how many worker connections the per-episode servers on
// this broker have refused as effect_broker_saturated since it was built.
// It only grows; a reader compares two readings. Lock- and allocation-free,
// so a saturated server pays one atomic add per refusal.
func (b *Broker) Saturations() uint64 { return b.saturated.Load() }

// Ready reports whether the broker admits work.
func (b *Broker) Ready() bool { return b.reconciled.Load() }
