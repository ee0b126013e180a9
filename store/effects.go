package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

var (
	kindPattern   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

const maxTarget = 64 << 10

// lockEffect returns the effect the mutation locked in its first round
// trip, or locks it now.
func lockEffect(m *mtx, id uuid.UUID) (Effect, error) {
	if e, ok := m.locked[id]; ok {
		return e, nil
	}
	e, err := scanEffect(m.tx.QueryRow(m.ctx, `SELECT `+effectCols+` FROM effects WHERE id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Effect{}, notFound("effect")
	}
	if err != nil {
		return Effect{}, err
	}
	if e.EpisodeID != m.ep.ID {
		return Effect{}, protocol.Errorf(protocol.CodeInternal, "store: effect moved episodes")
	}
	m.lock(e)
	return e, nil
}

// saveEffect moves e to state to (checked against the table), writes the
// columns that changed since the effect was locked and records the
// transition in the ledger.
func (m *mtx) saveEffect(e *Effect, to EffectState, extra map[string]any) error {
	from := e.State
	if err := checkTransition(from, to); err != nil {
		return err
	}
	orig := m.locked[e.ID]
	e.State = to
	e.UpdatedAt = m.now
	sets := "state = $2, updated_at = $3"
	args := []any{e.ID, string(e.State), m.now}
	add := func(col string, v any) {
		args = append(args, v)
		sets += fmt.Sprintf(", %s = $%d", col, len(args))
	}
	// Only what changed: unchanged jsonb columns would be re-parsed by the
	// server on every transition for nothing.
	if e.Revision != orig.Revision {
		add("revision", e.Revision)
		add("target", e.Target)
		add("payload_digest", e.PayloadDigest)
	}
	if e.VersionVector != orig.VersionVector {
		var vv []byte
		if e.VersionVector != nil {
			var err error
			if vv, err = json.Marshal(e.VersionVector); err != nil {
				return err
			}
		}
		add("version_vector", nullJSON(vv))
	}
	if e.CommitIntentAt != orig.CommitIntentAt {
		add("commit_intent_at", e.CommitIntentAt)
	}
	if e.OutcomeAt != orig.OutcomeAt {
		add("outcome_at", e.OutcomeAt)
		add("receipt", nullJSON(e.Receipt))
	}
	m.write(`UPDATE effects SET `+sets+` WHERE id = $1`, args...)
	m.locked[e.ID] = *e
	body := map[string]any{"effect_id": e.ID, "revision": e.Revision, "effect_epoch": e.Epoch,
		"from": string(from), "to": string(to)}
	for k, v := range extra {
		body[k] = v
	}
	m.emit("effect_transition", body)
	if to == Evaluating && e.AwaitsHuman() {
		_, err := m.openAction(*e, actionReason(*e))
		return err
	}
	return nil
}

// forward checks what every forward move before the horizon requires: an
// active episode, the request's epoch current, the effect's epoch current,
// the revision the caller saw, and no expiry.
func (m *mtx) forward(e Effect, claimedEpoch int64, revision int) error {
	if err := m.requireActive(); err != nil {
		return err
	}
	if err := m.requireEpoch(claimedEpoch); err != nil {
		return err
	}
	if e.Epoch != m.ep.Epoch {
		return stale("effect epoch %d, current %d", e.Epoch, m.ep.Epoch)
	}
	if revision != e.Revision {
		return stale("effect revision %d superseded by %d", revision, e.Revision)
	}
	if e.ExpiresAt != nil && !m.now.Before(*e.ExpiresAt) {
		return stale("effect expired")
	}
	return nil
}

// ProposeEffect records a new effect at revision 1 under the current epoch,
// backed by a live lease of that epoch.
func (p *Postgres) ProposeEffect(ctx context.Context, req Proposal) (Effect, error) {
	switch {
	case !kindPattern.MatchString(req.Kind):
		return Effect{}, invalid("effect kind")
	case req.Class < 2 || req.Class > 4:
		return Effect{}, invalid("effect class %d is not brokered", req.Class)
	case req.TargetID == "" || len(req.TargetID) > maxTextField:
		return Effect{}, invalid("target id")
	case !digestPattern.MatchString(req.PayloadDigest):
		return Effect{}, invalid("payload digest")
	case req.TTL < 0:
		return Effect{}, invalid("ttl")
	case len(req.OutsideLease) > maxOutsideLease || !utf8.ValidString(req.OutsideLease):
		return Effect{}, invalid("outside_lease")
	}
	if err := req.Prepare.check(); err != nil {
		return Effect{}, err
	}
	target, err := checkJSONObject("target", req.Target, maxTarget)
	if err != nil {
		return Effect{}, err
	}
	var out Effect
	tg := onEpisode(req.EpisodeID)
	tg.leaseMode, tg.leaseID, tg.lossy = "FOR SHARE", req.LeaseID, true
	err = p.mutate(ctx, "propose_effect", tg, func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(req.Epoch); err != nil {
			return err
		}
		l, err := lockLease(m, req.LeaseID, "FOR SHARE")
		if err != nil {
			return err
		}
		if err := l.live(m.ep.Epoch, m.now); err != nil {
			return err
		}
		e := Effect{ID: newID(), EpisodeID: m.ep.ID, LeaseID: l.ID, Kind: req.Kind, Class: req.Class,
			State: Proposed, Revision: 1, Epoch: m.ep.Epoch, TargetID: req.TargetID, Target: target,
			PayloadDigest: req.PayloadDigest, CreatedAt: m.now, UpdatedAt: m.now, OutsideLease: req.OutsideLease}
		if req.TTL > 0 {
			exp := m.now.Add(req.TTL)
			e.ExpiresAt = &exp
		}
		m.write(`INSERT INTO effects (`+effectCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
			NULL, $12, $13, $13, NULL, NULL, NULL, $14)`,
			e.ID, e.EpisodeID, e.LeaseID, e.Kind, e.Class, string(e.State), e.Revision, e.Epoch, e.TargetID,
			e.Target, e.PayloadDigest, e.ExpiresAt, m.now, nullString(e.OutsideLease))
		m.write(`INSERT INTO effect_revisions (effect_id, revision, epoch, target, payload_digest, version_vector, created_at)
			VALUES ($1, 1, $2, $3, $4, NULL, $5)`, e.ID, e.Epoch, e.Target, e.PayloadDigest, m.now)
		m.emit("effect_proposed", map[string]any{
			"effect_id": e.ID, "revision": 1, "kind": e.Kind, "class": e.Class, "target_id": e.TargetID,
			"target_digest": digestOf(target), "payload_digest": e.PayloadDigest, "lease_id": e.LeaseID,
			"expires_at": e.ExpiresAt, "outside_lease": nullString(e.OutsideLease),
		})
		if req.Prepare != nil {
			m.lock(e)
			if err := m.prepare(&e, l, *req.Prepare); err != nil {
				return err
			}
		}
		out = e
		return nil
	})
	return out, err
}

func (t *Trajectory) check() error {
	if t != nil && len(t.Regime) > maxTextField {
		return invalid("trajectory regime")
	}
	return nil
}

// prepare captures e's version vector from the episode as locked, backed
// by the live lease l, and moves e to prepared. The caller has run the
// forward checks on e.
func (m *mtx) prepare(e *Effect, l Lease, t Trajectory) error {
	if err := checkTransition(e.State, Prepared); err != nil {
		return err
	}
	if err := l.live(m.ep.Epoch, m.now); err != nil {
		return err
	}
	vv := VersionVector{EpisodeID: m.ep.ID, Epoch: m.ep.Epoch, PolicyVersion: m.ep.PolicyVersion,
		SnapshotAncestry: m.ep.CurrentCheckpoint, TrajectoryVersion: t.Version,
		TrajectoryRegime: t.Regime, LeaseID: e.LeaseID, EffectRevision: e.Revision}
	raw, err := json.Marshal(vv)
	if err != nil {
		return err
	}
	e.VersionVector = &vv
	m.write(`UPDATE effect_revisions SET version_vector = $3 WHERE effect_id = $1 AND revision = $2`, e.ID, e.Revision, raw)
	return m.saveEffect(e, Prepared, map[string]any{"version_vector": vv})
}

// PrepareEffect captures the version vector from durable state and moves
// proposed → prepared.
func (p *Postgres) PrepareEffect(ctx context.Context, req Prepare) (Effect, error) {
	t := &Trajectory{Version: req.TrajectoryVersion, Regime: req.TrajectoryRegime}
	if err := t.check(); err != nil {
		return Effect{}, err
	}
	var out Effect
	tg := onEffect(req.EffectID)
	tg.leaseMode, tg.lossy = "FOR SHARE", true
	err := p.mutate(ctx, "prepare_effect", tg, func(m *mtx) error {
		e, err := lockEffect(m, req.EffectID)
		if err != nil {
			return err
		}
		if err := checkTransition(e.State, Prepared); err != nil {
			return err
		}
		if err := m.forward(e, req.Epoch, req.Revision); err != nil {
			return err
		}
		l, err := lockLease(m, e.LeaseID, "FOR SHARE")
		if err != nil {
			return err
		}
		if err := m.prepare(&e, l, *t); err != nil {
			return err
		}
		out = e
		return nil
	})
	return out, err
}

// ReviseEffect replaces target and payload before the horizon: revision+1,
// back to proposed, version vector cleared. Decisions and approvals bound
// to the old revision no longer match.
func (p *Postgres) ReviseEffect(ctx context.Context, req Revision) (Effect, error) {
	if !digestPattern.MatchString(req.PayloadDigest) {
		return Effect{}, invalid("payload digest")
	}
	if err := req.Prepare.check(); err != nil {
		return Effect{}, err
	}
	target, err := checkJSONObject("target", req.Target, maxTarget)
	if err != nil {
		return Effect{}, err
	}
	var out Effect
	tg := onEffect(req.EffectID)
	tg.lossy = true
	if req.Prepare != nil {
		tg.leaseMode = "FOR SHARE"
	}
	err = p.mutate(ctx, "revise_effect", tg, func(m *mtx) error {
		e, err := lockEffect(m, req.EffectID)
		if err != nil {
			return err
		}
		if err := checkTransition(e.State, Proposed); err != nil {
			return err
		}
		if err := m.forward(e, req.Epoch, req.FromRevision); err != nil {
			return err
		}
		e.Revision++
		e.Target, e.PayloadDigest, e.VersionVector = target, req.PayloadDigest, nil
		m.write(`INSERT INTO effect_revisions (effect_id, revision, epoch, target, payload_digest, version_vector, created_at)
			VALUES ($1, $2, $3, $4, $5, NULL, $6)`, e.ID, e.Revision, e.Epoch, e.Target, e.PayloadDigest, m.now)
		if err := m.saveEffect(&e, Proposed, map[string]any{
			"target_digest": digestOf(target), "payload_digest": e.PayloadDigest,
		}); err != nil {
			return err
		}
		if req.Prepare != nil {
			l, err := lockLease(m, e.LeaseID, "FOR SHARE")
			if err != nil {
				return err
			}
			if err := m.prepare(&e, l, *req.Prepare); err != nil {
				return err
			}
		}
		out = e
		return nil
	})
	return out, err
}

// Transition performs the state changes that need no more than the table
// and the epoch: evaluating, ready, committing, aborted, expired. The
// others have their own calls because they carry more: prepared
// (PrepareEffect), proposed (ReviseEffect), commit_intent (BeginCommit),
// outcomes (FinishCommit), stale (AdvanceEpoch only — staleness is what an
// epoch advance means).
func (p *Postgres) Transition(ctx context.Context, req Transition) (Effect, error) {
	if !req.To.Valid() {
		return Effect{}, invalid("unknown effect state")
	}
	var out Effect
	err := p.mutate(ctx, "effect_transition", transitionTarget(req), transitionFn(req, &out))
	return out, err
}

func transitionTarget(req Transition) target {
	tg := onEffect(req.EffectID)
	// Before the horizon a crash may lose the move; committing, the intent
	// an adapter acts under, and the settling moves are durable.
	tg.lossy = req.To == Evaluating || req.To == Ready
	return tg
}

// transitionFn is Transition's mutation, which stores the moved effect in
// out.
func transitionFn(req Transition, out *Effect) func(*mtx) error {
	return func(m *mtx) error {
		e, err := lockEffect(m, req.EffectID)
		if err != nil {
			return err
		}
		if err := checkTransition(e.State, req.To); err != nil {
			return err
		}
		switch req.To {
		case Evaluating, Ready:
			if err := m.forward(e, req.Epoch, req.Revision); err != nil {
				return err
			}
		case Committing, Aborted, Expired:
			// These stay possible after the episode ended or the epoch
			// moved on. Before the horizon the caller must have seen the
			// current epoch. Past it (committing; aborted after
			// reconciliation) the authority was settled when
			// commit_intent was recorded, and a later epoch must not be
			// able to strand an adapter mid-commit, so Epoch is ignored.
			if e.State.PreIntent() {
				if err := m.requireEpoch(req.Epoch); err != nil {
					return err
				}
			}
			if req.Revision != e.Revision {
				return stale("effect revision %d superseded by %d", req.Revision, e.Revision)
			}
		default:
			return invalid("transition to %s has its own call", req.To)
		}
		extra := map[string]any{}
		if req.Reason != "" {
			extra["reason"] = clip(req.Reason)
		}
		if req.To == Aborted && e.State == CommitIntent {
			e.OutcomeAt = &m.now
		}
		if err := m.saveEffect(&e, req.To, extra); err != nil {
			return err
		}
		*out = e
		return nil
	}
}

// EffectInEpisode reads one of an episode's effects together with the
// episode's current epoch, in one statement (one round trip, one
// snapshot): the broker's ownership check on every worker request. When
// the episode has no such effect the answer is not_found and the epoch is
// still returned, so a fenced caller can be told it is fenced first. The
// effect comes without its version vector (nil): what compares it is the
// commit horizon, which reads it again under its locks.
func (p *Postgres) EffectInEpisode(ctx context.Context, episodeID, effectID uuid.UUID) (Effect, int64, error) {
	var e Effect
	var epoch int64
	err := p.query(ctx, "effect_in_episode", func(tx querier) error {
		var err error
		e, err = scanEffect(withFirst{tx.QueryRow(ctx, `SELECT (SELECT epoch FROM episodes WHERE id = $1), `+effectColsNoVector+`
			FROM effects WHERE id = $2 AND episode_id = $1`, episodeID, effectID), &epoch})
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT epoch FROM episodes WHERE id = $1`, episodeID).Scan(&epoch); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("episode")
			}
			return err
		}
		return notFound("effect")
	})
	return e, epoch, err
}

// withFirst scans one leading column into first, the rest as asked.
type withFirst struct {
	row   pgx.Row
	first any
}

func (w withFirst) Scan(dest ...any) error { return w.row.Scan(append([]any{w.first}, dest...)...) }

// Effect reads an effect.
func (p *Postgres) Effect(ctx context.Context, id uuid.UUID) (Effect, error) {
	var out Effect
	err := p.query(ctx, "effect", func(tx querier) error {
		var err error
		out, err = scanEffect(tx.QueryRow(ctx, `SELECT `+effectCols+` FROM effects WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("effect")
		}
		return err
	})
	return out, err
}

const maxDecisionBody = 64 << 10

// RecordDecision binds a decision to an effect's exact current revision and
// epoch, while the effect is between prepare and commit.
func (p *Postgres) RecordDecision(ctx context.Context, req NewDecision) (Decision, error) {
	body, err := checkDecision(req)
	if err != nil {
		return Decision{}, err
	}
	var out Decision
	err = p.mutate(ctx, "record_decision", onEffect(req.EffectID), func(m *mtx) error {
		e, err := lockEffect(m, req.EffectID)
		if err != nil {
			return err
		}
		out, err = m.recordDecision(e, req, body)
		return err
	})
	return out, err
}

// checkDecision admits a decision's fields and returns its body.
func checkDecision(req NewDecision) (json.RawMessage, error) {
	switch {
	case req.Kind != DecisionSemantic && req.Kind != DecisionVerification && req.Kind != DecisionHuman:
		return nil, invalid("decision kind")
	case req.Verdict != VerdictAllow && req.Verdict != VerdictDeny:
		return nil, invalid("decision verdict")
	case (req.KeyID == "") != (len(req.Signature) == 0):
		return nil, invalid("key id and signature go together")
	case req.Kind == DecisionHuman && len(req.Signature) == 0:
		return nil, invalid("a human decision must be signed")
	case len(req.KeyID) > maxTextField || len(req.Signature) > 1024:
		return nil, invalid("signature")
	}
	return checkJSONObject("decision body", req.Body, maxDecisionBody)
}

// recordDecision binds req to e, locked, at its current revision.
func (m *mtx) recordDecision(e Effect, req NewDecision, body json.RawMessage) (Decision, error) {
	switch e.State {
	case Prepared, Evaluating, Ready:
	default:
		return Decision{}, protocol.Errorf(protocol.CodeIllegalTransition, "effect is %s; decisions bind between prepare and commit", e.State)
	}
	if err := m.forward(e, req.Epoch, req.Revision); err != nil {
		return Decision{}, err
	}
	d := Decision{ID: newID(), EffectID: e.ID, Revision: e.Revision, Epoch: e.Epoch, Kind: req.Kind,
		Verdict: req.Verdict, Body: body, KeyID: req.KeyID, Signature: req.Signature, CreatedAt: m.now}
	var key *string
	if d.KeyID != "" {
		key = &d.KeyID
	}
	m.write(`INSERT INTO decisions (`+decisionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		d.ID, d.EffectID, d.Revision, d.Epoch, d.Kind, d.Verdict, d.Body, key, nullBytes(d.Signature), m.now)
	m.emit("decision_recorded", map[string]any{
		"decision_id": d.ID, "effect_id": d.EffectID, "revision": d.Revision, "decision_epoch": d.Epoch,
		"kind": d.Kind, "verdict": d.Verdict, "key_id": d.KeyID, "body_digest": digestOf(body),
		"signature_digest": digestOf(d.Signature),
	})
	return d, nil
}

// Evaluate performs an Evaluation: the broker's evaluate request in one
// transaction (one fsync) where it would otherwise take up to three, with
// the same checks, in the same order, under the same locks, and the same
// ledger events.
func (p *Postgres) Evaluate(ctx context.Context, req Evaluation) (Effect, error) {
	bodies, err := checkEvaluation(req)
	if err != nil {
		return Effect{}, err
	}
	var out Effect
	tg := onEffect(req.EffectID)
	tg.lossy = true
	err = p.mutate(ctx, "evaluate_effect", tg, func(m *mtx) error { return m.evaluate(req, bodies, &out) })
	return out, err
}

// EvaluateInEpisode is the broker's whole evaluate request in one
// transaction, its ownership check (EffectInEpisode's) included. It locks
// episodeID and, in the same round trip, the effect only if it is that
// episode's: another episode's effect is not_found, and neither it nor its
// episode is locked. The request's epoch is checked first
// (stale_request_epoch, before not_found, so a fenced caller learns only
// that it is fenced); then plan decides, from the effect as locked, the
// Evaluation to perform, which must name that effect and the request's
// epoch. A plan error records nothing; the plan's Then is returned once
// its evaluation is recorded.
func (p *Postgres) EvaluateInEpisode(ctx context.Context, episodeID, effectID uuid.UUID, epoch int64,
	plan func(Effect) (EvaluationPlan, error)) (Effect, error) {
	var out Effect
	var then error
	tg := target{id: episodeID, what: "episode", effect: true, effectID: effectID, lossy: true}
	err := p.mutate(ctx, "evaluate_effect", tg, func(m *mtx) error {
		then = nil
		if err := m.requireEpoch(epoch); err != nil {
			return err
		}
		e, ok := m.locked[effectID]
		if !ok {
			return notFound("effect")
		}
		pl, err := plan(e)
		if err != nil {
			return err
		}
		if pl.EffectID != effectID || pl.Epoch != epoch {
			return invalid("an evaluation plan names another effect or epoch than its request")
		}
		bodies, err := checkEvaluation(pl.Evaluation)
		if err != nil {
			return err
		}
		then = pl.Then
		return m.evaluate(pl.Evaluation, bodies, &out)
	})
	if err != nil {
		return Effect{}, err
	}
	return out, then
}

// EvaluationPlan is what EvaluateInEpisode's plan decided.
type EvaluationPlan struct {
	Evaluation
	// Then, when set, is the answer once the evaluation is recorded: a
	// refusal that still moves the effect (to evaluating).
	Then error
}

func checkEvaluation(req Evaluation) ([]json.RawMessage, error) {
	bodies := make([]json.RawMessage, len(req.Decisions))
	for i, d := range req.Decisions {
		if d.EffectID != req.EffectID || d.Revision != req.Revision || d.Epoch != req.Epoch {
			return nil, invalid("a decision names another effect revision than its evaluation")
		}
		if req.Ready && d.Verdict != VerdictAllow {
			return nil, invalid("an effect a decision denies cannot become ready")
		}
		var err error
		if bodies[i], err = checkDecision(d); err != nil {
			return nil, err
		}
	}
	return bodies, nil
}

// evaluate is an Evaluation's mutation, which stores the effect in out.
func (m *mtx) evaluate(req Evaluation, bodies []json.RawMessage, out *Effect) error {
	e, err := lockEffect(m, req.EffectID)
	if err != nil {
		return err
	}
	if e.State == Prepared {
		if err := m.forward(e, req.Epoch, req.Revision); err != nil {
			return err
		}
		if err := m.saveEffect(&e, Evaluating, map[string]any{}); err != nil {
			return err
		}
	}
	// A class 4 effect waits on a human: the Action naming it is opened
	// as it reaches evaluating, and an approval carried by this request
	// resolves it here, in the same transaction — once: an Action already
	// answered takes no second decision.
	var action *Action
	if e.AwaitsHuman() {
		if action, err = m.openAction(e, actionReason(e)); err != nil {
			return err
		}
	}
	for i, d := range req.Decisions {
		if d.Kind == DecisionHuman && action != nil && action.State != ActionPending {
			return protocol.Errorf(protocol.CodeIllegalTransition, "the action is %s: it takes no second decision", action.State)
		}
		rec, err := m.recordDecision(e, d, bodies[i])
		if err != nil {
			return err
		}
		if rec.Kind == DecisionHuman && action != nil {
			m.resolveAction(action, rec)
		}
	}
	if req.Ready {
		if err := checkTransition(e.State, Ready); err != nil {
			return err
		}
		if err := m.forward(e, req.Epoch, req.Revision); err != nil {
			return err
		}
		if err := m.saveEffect(&e, Ready, map[string]any{}); err != nil {
			return err
		}
	}
	*out = e
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullJSON(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}
