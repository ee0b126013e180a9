package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Action is a human decision the kernel waits on, bound to one exact
// operation: the effect, its revision, epoch, payload digest, kind and
// target as they stood when the Action was opened. The store checks that
// binding when it opens the Action, when it resolves it, and hands it to
// the commit check (CommitView.Action), which checks it a third time.
type Action struct {
	ID            uuid.UUID       `json:"id"`
	EpisodeID     uuid.UUID       `json:"episode_id"`
	EffectID      uuid.UUID       `json:"effect_id"`
	Revision      int             `json:"revision"`
	Epoch         int64           `json:"epoch"`
	PayloadDigest string          `json:"payload_digest"`
	Kind          string          `json:"kind"`
	TargetID      string          `json:"target_id"`
	Target        json.RawMessage `json:"target"`
	Reason        string          `json:"reason"`
	Priority      int             `json:"priority"`
	State         ActionState     `json:"state"`
	SnoozedUntil  *time.Time      `json:"snoozed_until,omitempty"`
	Feedback      string          `json:"feedback,omitempty"`
	DecisionID    *uuid.UUID      `json:"decision_id,omitempty"`
	// TaskID names the task a budget Action is about (EffectID, EpisodeID,
	// Revision and Epoch are then zero): Kind is TaskBudgetKind, TargetID
	// its project, PayloadDigest its spec digest, Target its reserve.
	TaskID     *uuid.UUID `json:"task_id,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
}

// ActionState is where an Action stands.
type ActionState string

const (
	ActionPending   ActionState = "pending"
	ActionApproved  ActionState = "approved"
	ActionDenied    ActionState = "denied"
	ActionDismissed ActionState = "dismissed"
	// ActionSuperseded: the effect was revised (or fenced) before anyone
	// answered; the new revision has an Action of its own.
	ActionSuperseded ActionState = "superseded"
)

// Feedback a dismissal may record: why the operator said neither yes nor
// no. It is kept as feedback, never as standing policy.
var DismissalFeedback = []string{"dont_ask_again", "wrong_call", "need_more_info", "no_longer_relevant"}

// priorityClass4 orders Actions: a class 4 effect waiting on its approval.
const priorityClass4 = 50

// MaxPendingActions bounds the decisions waiting for a human, across the
// kernels of one database: beyond it, a class 4 effect is refused at
// evaluate as effect_broker_saturated (retryable), and stays prepared,
// rather than a queue of decisions no one can read growing without end.
const MaxPendingActions = 1000

// MaxPendingActionsPerEpisode bounds the decisions one episode may have
// waiting: its worker, however hostile, cannot fill the queue every other
// episode's humans read (beyond, effect_broker_saturated, as above).
const MaxPendingActionsPerEpisode = 16

// Binds says whether a names exactly e as it stands.
func (a *Action) Binds(e Effect) bool {
	return a.EffectID == e.ID && a.EpisodeID == e.EpisodeID && a.Revision == e.Revision && a.Epoch == e.Epoch &&
		a.PayloadDigest == e.PayloadDigest && a.Kind == e.Kind && a.TargetID == e.TargetID && jsonEqual(a.Target, e.Target)
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// ResolutionKey is the deterministic dedup key of resolving action with
// verdict: the same answer twice is one resolution; a different one after
// it is refused.
func ResolutionKey(action uuid.UUID, verdict string) string {
	sum := sha256.Sum256([]byte("autonomic.action.v1\x00" + action.String() + "\x00" + verdict))
	return hex.EncodeToString(sum[:])
}

const actionCols = `id, episode_id, effect_id, revision, epoch, payload_digest, kind, target_id, target, reason, priority,
	state, snoozed_until, feedback, decision_id, created_at, resolved_at, task_id`

func scanAction(r pgx.Row) (Action, error) {
	var a Action
	var feedback *string
	var episode, effect *uuid.UUID
	var revision *int
	var epoch *int64
	err := r.Scan(&a.ID, &episode, &effect, &revision, &epoch, &a.PayloadDigest, &a.Kind, &a.TargetID, &a.Target,
		&a.Reason, &a.Priority, &a.State, &a.SnoozedUntil, &feedback, &a.DecisionID, &a.CreatedAt, &a.ResolvedAt, &a.TaskID)
	if feedback != nil {
		a.Feedback = *feedback
	}
	if episode != nil {
		a.EpisodeID = *episode
	}
	if effect != nil {
		a.EffectID = *effect
	}
	if revision != nil {
		a.Revision = *revision
	}
	if epoch != nil {
		a.Epoch = *epoch
	}
	return a, err
}

// openAction opens the Action for e as it stands (check 1: its operation
// is copied from the locked row), unless one is open for it already; any
// pending Action of an earlier revision or epoch is superseded. saveEffect
// calls it whenever a class 4 effect enters evaluating, so every class 4
// effect awaiting its human has exactly one Action.
func (m *mtx) openAction(e Effect, reason string) (*Action, error) {
	if a, ok := m.actions[e.ID]; ok && a.Revision == e.Revision && a.Epoch == e.Epoch {
		return a, nil
	}
	if m.actions == nil {
		m.actions = map[uuid.UUID]*Action{}
	}
	a, err := scanAction(m.tx.QueryRow(m.ctx, `SELECT `+actionCols+` FROM actions WHERE effect_id = $1 AND revision = $2 AND epoch = $3 FOR UPDATE`,
		e.ID, e.Revision, e.Epoch))
	if err == nil {
		m.actions[e.ID] = &a
		return &a, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	var pending, mine int
	if err := m.tx.QueryRow(m.ctx, `SELECT count(*), count(*) FILTER (WHERE episode_id = $2) FROM actions
		WHERE state = 'pending' AND effect_id IS DISTINCT FROM $1`, e.ID, e.EpisodeID).Scan(&pending, &mine); err != nil {
		return nil, err
	}
	if pending >= MaxPendingActions {
		return nil, protocol.Errorf(protocol.CodeEffectBrokerSaturated, "%d decisions already wait for a human", pending)
	}
	if mine >= MaxPendingActionsPerEpisode {
		return nil, protocol.Errorf(protocol.CodeEffectBrokerSaturated, "%d decisions of this episode already wait for a human", mine)
	}
	m.write(`UPDATE actions SET state = 'superseded', resolved_at = $2 WHERE effect_id = $1 AND state = 'pending'`, e.ID, m.now)
	a = Action{ID: newID(), EpisodeID: e.EpisodeID, EffectID: e.ID, Revision: e.Revision, Epoch: e.Epoch, PayloadDigest: e.PayloadDigest,
		Kind: e.Kind, TargetID: e.TargetID, Target: e.Target, Reason: reason, Priority: priorityClass4, State: ActionPending, CreatedAt: m.now}
	m.write(`INSERT INTO actions (`+actionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULL, NULL, NULL, $13, NULL, NULL)`,
		a.ID, a.EpisodeID, a.EffectID, a.Revision, a.Epoch, a.PayloadDigest, a.Kind, a.TargetID, a.Target, a.Reason, a.Priority, string(a.State), m.now)
	m.emit("action_opened", map[string]any{"action_id": a.ID, "effect_id": a.EffectID, "revision": a.Revision, "action_epoch": a.Epoch,
		"payload_digest": a.PayloadDigest, "kind": a.Kind, "target_id": a.TargetID, "reason": a.Reason})
	m.actions[e.ID] = &a
	return &a, nil
}

// reasonClass4 is why a class 4 effect's Action is opened.
const reasonClass4 = "a class 4 effect awaits a human approval"

// maxOutsideLease bounds Proposal.OutsideLease (the column's check).
const maxOutsideLease = 512

// actionReason is why e's Action is opened: what its lease lacks, for an
// effect outside it, before its class.
func actionReason(e Effect) string {
	if e.OutsideLease != "" {
		return "outside the lease, which an approval lifts for this one operation: " + e.OutsideLease
	}
	return reasonClass4
}

// resolveAction records a's resolution by the human decision d (recorded
// in this transaction), with its dedup key.
func (m *mtx) resolveAction(a *Action, d Decision) {
	a.State = ActionDenied
	if d.Verdict == VerdictAllow {
		a.State = ActionApproved
	}
	a.DecisionID, a.ResolvedAt = &d.ID, &m.now
	m.write(`UPDATE actions SET state = $2, resolved_at = $3, dedup_key = $4, decision_id = $5 WHERE id = $1`,
		a.ID, string(a.State), m.now, ResolutionKey(a.ID, d.Verdict), d.ID)
	m.emit("action_resolved", map[string]any{"action_id": a.ID, "effect_id": a.EffectID, "revision": a.Revision,
		"state": string(a.State), "decision_id": d.ID, "key_id": d.KeyID})
}

// ActionResolution is a human's answer to one Action: their signed
// decision on the exact operation it names.
type ActionResolution struct {
	ActionID uuid.UUID
	Decision NewDecision // Kind DecisionHuman, bound to the Action's effect revision and epoch
}

// ResolveAction answers an Action in one transaction: check 2 (the Action
// is pending and still names the effect exactly as it stands, evaluating),
// the human decision recorded, the effect made ready on an allow, and the
// Action resolved with its dedup key. The same answer again returns the
// Action as resolved and records nothing (replays, a second operator,
// crash recovery); a different answer after it is illegal_transition.
func (p *Postgres) ResolveAction(ctx context.Context, r ActionResolution) (Action, Effect, error) {
	if r.Decision.Kind != DecisionHuman || (r.Decision.Verdict != VerdictAllow && r.Decision.Verdict != VerdictDeny) {
		return Action{}, Effect{}, invalid("an Action is resolved by a human decision that allows or denies")
	}
	body, err := checkDecision(r.Decision)
	if err != nil {
		return Action{}, Effect{}, err
	}
	a, err := p.Action(ctx, r.ActionID)
	if err != nil {
		return Action{}, Effect{}, err
	}
	var outA Action
	var outE Effect
	err = p.mutate(ctx, "resolve_action", onEffect(a.EffectID), func(m *mtx) error {
		a, err := scanAction(m.tx.QueryRow(m.ctx, `SELECT `+actionCols+` FROM actions WHERE id = $1 FOR UPDATE`, r.ActionID))
		if err != nil {
			return err
		}
		e, err := lockEffect(m, a.EffectID)
		if err != nil {
			return err
		}
		if a.State == ActionSuperseded {
			return stale("the action was superseded: its effect was revised or fenced")
		}
		if a.State != ActionPending {
			// The same answer (its dedup key, ResolutionKey of this verdict,
			// is the one recorded) is already recorded; any other is refused.
			if a.State == ActionApproved && r.Decision.Verdict == VerdictAllow || a.State == ActionDenied && r.Decision.Verdict == VerdictDeny {
				outA, outE = a, e
				return nil
			}
			return protocol.Errorf(protocol.CodeIllegalTransition, "the action is %s", a.State)
		}
		if !a.Binds(e) || e.State != Evaluating {
			return stale("the action names revision %d in epoch %d; the effect is at revision %d in epoch %d, %s",
				a.Revision, a.Epoch, e.Revision, e.Epoch, e.State)
		}
		if r.Decision.EffectID != e.ID || r.Decision.Revision != a.Revision || r.Decision.Epoch != a.Epoch {
			return invalid("the decision names another operation than the action")
		}
		d, err := m.recordDecision(e, r.Decision, body)
		if err != nil {
			return err
		}
		if d.Verdict == VerdictAllow {
			if err := m.saveEffect(&e, Ready, map[string]any{}); err != nil {
				return err
			}
		}
		m.resolveAction(&a, d)
		outA, outE = a, e
		return nil
	})
	return outA, outE, err
}

// SnoozeAction hides a pending Action from the open list until now + d
// (the database's clock; deterministic: no model picks the time).
func (p *Postgres) SnoozeAction(ctx context.Context, id uuid.UUID, d time.Duration) (Action, error) {
	if d <= 0 || d > 30*24*time.Hour {
		return Action{}, invalid("snooze between 1 s and 30 days")
	}
	if a, err := p.Action(ctx, id); err == nil && a.TaskID != nil {
		return p.mutateTaskAction(ctx, "snooze_action", a, func(m *ttask, a *Action) error {
			if a.State != ActionPending {
				return protocol.Errorf(protocol.CodeIllegalTransition, "the action is %s", a.State)
			}
			until := m.now.Add(d)
			a.SnoozedUntil = &until
			if _, err := m.tx.Exec(m.ctx, `UPDATE actions SET snoozed_until = $2 WHERE id = $1`, a.ID, until); err != nil {
				return err
			}
			return m.emit("action_snoozed", map[string]any{"action_id": a.ID, "until": until})
		})
	}
	var out Action
	err := p.mutate(ctx, "snooze_action", target{via: "actions", id: id, what: "action"}, func(m *mtx) error {
		a, err := scanAction(m.tx.QueryRow(m.ctx, `SELECT `+actionCols+` FROM actions WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		if a.State != ActionPending {
			return protocol.Errorf(protocol.CodeIllegalTransition, "the action is %s", a.State)
		}
		until := m.now.Add(d)
		a.SnoozedUntil = &until
		m.write(`UPDATE actions SET snoozed_until = $2 WHERE id = $1`, id, until)
		m.emit("action_snoozed", map[string]any{"action_id": id, "until": until})
		out = a
		return nil
	})
	return out, err
}

// DismissAction closes a pending Action without an answer, recording why
// (one of DismissalFeedback) as feedback. Its effect gets no approval from
// it: it waits until its speculation window or its episode ends.
func (p *Postgres) DismissAction(ctx context.Context, id uuid.UUID, feedback string) (Action, error) {
	known := false
	for _, f := range DismissalFeedback {
		known = known || f == feedback
	}
	if !known {
		return Action{}, invalid("dismissal feedback is one of %v", DismissalFeedback)
	}
	if a, err := p.Action(ctx, id); err == nil && a.TaskID != nil {
		return p.mutateTaskAction(ctx, "dismiss_action", a, func(m *ttask, a *Action) error {
			if a.State != ActionPending {
				return protocol.Errorf(protocol.CodeIllegalTransition, "the action is %s", a.State)
			}
			a.State, a.Feedback, a.ResolvedAt = ActionDismissed, feedback, &m.now
			if _, err := m.tx.Exec(m.ctx, `UPDATE actions SET state = 'dismissed', feedback = $2, resolved_at = $3 WHERE id = $1`,
				a.ID, feedback, m.now); err != nil {
				return err
			}
			return m.emit("action_dismissed", map[string]any{"action_id": a.ID, "feedback": feedback})
		})
	}
	var out Action
	err := p.mutate(ctx, "dismiss_action", target{via: "actions", id: id, what: "action"}, func(m *mtx) error {
		a, err := scanAction(m.tx.QueryRow(m.ctx, `SELECT `+actionCols+` FROM actions WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		if a.State != ActionPending {
			return protocol.Errorf(protocol.CodeIllegalTransition, "the action is %s", a.State)
		}
		a.State, a.Feedback, a.ResolvedAt = ActionDismissed, feedback, &m.now
		m.write(`UPDATE actions SET state = 'dismissed', feedback = $2, resolved_at = $3 WHERE id = $1`, id, feedback, m.now)
		m.emit("action_dismissed", map[string]any{"action_id": id, "feedback": feedback})
		out = a
		return nil
	})
	return out, err
}

// Action reads one Action.
func (p *Postgres) Action(ctx context.Context, id uuid.UUID) (Action, error) {
	var out Action
	err := p.query(ctx, "read_action", func(tx querier) error {
		var err error
		out, err = scanAction(tx.QueryRow(ctx, `SELECT `+actionCols+` FROM actions WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("action")
		}
		return err
	})
	return out, err
}

// ActionFor reads the Action opened for an effect's revision in epoch.
func (p *Postgres) ActionFor(ctx context.Context, effectID uuid.UUID, revision int, epoch int64) (Action, error) {
	var out Action
	err := p.query(ctx, "read_action", func(tx querier) error {
		var err error
		out, err = scanAction(tx.QueryRow(ctx, `SELECT `+actionCols+` FROM actions WHERE effect_id = $1 AND revision = $2 AND epoch = $3`,
			effectID, revision, epoch))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("action")
		}
		return err
	})
	return out, err
}

// Actions lists Actions, highest priority and oldest first: the open
// ones (pending, not snoozed, their effect still evaluating at that
// revision and epoch) unless all, of one episode unless
// episode is uuid.Nil; at most MaxList.
func (p *Postgres) Actions(ctx context.Context, episode uuid.UUID, all bool) ([]Action, error) {
	var out []Action
	err := p.query(ctx, "list_actions", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT `+actionCols+` FROM actions
			WHERE ($1::uuid IS NULL OR episode_id = $1)
			  AND ($2 OR (state = 'pending' AND (snoozed_until IS NULL OR snoozed_until <= now())
			        AND (EXISTS (SELECT 1 FROM effects f WHERE f.id = actions.effect_id AND f.revision = actions.revision
			                     AND f.epoch = actions.epoch AND f.state = 'evaluating')
			             OR EXISTS (SELECT 1 FROM tasks t WHERE t.id = actions.task_id AND t.state = 'queued'))))
			ORDER BY priority DESC, created_at, id LIMIT $3`, nullUUID(episode), all, MaxList)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Action, error) { return scanAction(r) })
		return err
	})
	return out, err
}
