package store

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Budget Actions: a queued task its project's budget holds back waits on
// an operator. Its Action names one exact operation — the task, its spec
// digest, its project and its reserve, all immutable — and is checked
// when it opens (copied from the locked task), when it is answered (the
// task still queued and held back) and at the claim that follows (the
// grant is spent by that one claim and admits nothing else). Approving it
// lets the task draw on its project's emergency reserve once; denying it
// cancels the task. Its events go to the task's ledger.

// TaskBudgetKind is the Kind of a budget Action.
const TaskBudgetKind = "task_budget"

// priorityBudget orders budget Actions below class 4 approvals.
const priorityBudget = 40

// openTaskAction opens the budget Action of the locked task, unless one is
// pending already or the bound is reached (the task's own event still
// says it is held back).
func (m *ttask) openTaskAction(reason string) error {
	var pending int
	var mine bool
	if err := m.tx.QueryRow(m.ctx, `SELECT count(*), COALESCE(bool_or(task_id = $1), false) FROM actions WHERE state = 'pending'`, m.t.ID).
		Scan(&pending, &mine); err != nil {
		return err
	}
	if mine || pending >= MaxPendingActions {
		return nil
	}
	reserve, _ := json.Marshal(m.t.Reserve)
	id := newID()
	if _, err := m.tx.Exec(m.ctx, `INSERT INTO actions (`+actionCols+`) VALUES ($1, NULL, NULL, NULL, NULL, $2, $3, $4, $5, $6, $7,
		'pending', NULL, NULL, NULL, $8, NULL, $9)`,
		id, m.t.SpecDigest, TaskBudgetKind, m.t.Project, reserve, clip(reason), priorityBudget, m.now, m.t.ID); err != nil {
		return err
	}
	return m.emit("action_opened", map[string]any{"action_id": id, "task_id": m.t.ID, "kind": TaskBudgetKind,
		"payload_digest": m.t.SpecDigest, "target_id": m.t.Project, "reserve": m.t.Reserve, "reason": clip(reason)})
}

// supersedeTaskAction closes the task's pending budget Action: the task
// left the queue another way (claimed once its budget allowed, cancelled).
func (m *ttask) supersedeTaskAction() error {
	_, err := m.tx.Exec(m.ctx, `UPDATE actions SET state = 'superseded', resolved_at = $2 WHERE task_id = $1 AND state = 'pending'`,
		m.t.ID, m.now)
	return err
}

// mutateTaskAction runs fn on a task's Action, locked after its task, in
// one task mutation (its events go to the task's ledger).
func (p *Postgres) mutateTaskAction(ctx context.Context, op string, a Action, fn func(m *ttask, a *Action) error) (Action, error) {
	var out Action
	_, err := p.mutateTask(ctx, op, *a.TaskID, func(m *ttask) error {
		locked, err := scanAction(m.tx.QueryRow(m.ctx, `SELECT `+actionCols+` FROM actions WHERE id = $1 FOR UPDATE`, a.ID))
		if err != nil {
			return err
		}
		if err := fn(m, &locked); err != nil {
			return err
		}
		out = locked
		return nil
	})
	return out, err
}

// ResolveTaskAction answers a budget Action in one transaction, by the
// operator who: allow grants the task its project's emergency reserve for
// its next claim, deny cancels the task. The task must still be queued,
// held back, and be the operation the Action names (check 2). The same
// answer again returns the Action and records nothing; another answer
// after it is illegal_transition.
func (p *Postgres) ResolveTaskAction(ctx context.Context, id uuid.UUID, allow bool, who string) (Action, error) {
	a, err := p.Action(ctx, id)
	if err != nil {
		return Action{}, err
	}
	if a.TaskID == nil {
		return Action{}, invalid("the action names an effect: it is answered by a signed approval")
	}
	verdict := VerdictDeny
	if allow {
		verdict = VerdictAllow
	}
	return p.mutateTaskAction(ctx, "resolve_task_action", a, func(m *ttask, a *Action) error {
		switch {
		case a.State == ActionApproved && allow, a.State == ActionDenied && !allow:
			return nil // its dedup key, ResolutionKey of this verdict, is the one recorded
		case a.State == ActionSuperseded:
			return stale("the action was superseded: its task left the queue")
		case a.State != ActionPending:
			return protocol.Errorf(protocol.CodeIllegalTransition, "the action is %s", a.State)
		case m.t.State != TaskQueued || m.t.Blocked == "" || m.t.SpecDigest != a.PayloadDigest || m.t.Project != a.TargetID:
			return stale("the action names task %s as it was held back; it is %s now", m.t.ID, m.t.State)
		}
		a.State = ActionDenied
		if allow {
			a.State = ActionApproved
		}
		a.ResolvedAt = &m.now
		if _, err := m.tx.Exec(m.ctx, `UPDATE actions SET state = $2, resolved_at = $3, dedup_key = $4 WHERE id = $1`,
			a.ID, string(a.State), m.now, ResolutionKey(a.ID, verdict)); err != nil {
			return err
		}
		if err := m.emit("action_resolved", map[string]any{"action_id": a.ID, "task_id": m.t.ID, "state": string(a.State), "by": clip(who)}); err != nil {
			return err
		}
		if !allow {
			return m.end(TaskCancelled, "", "its budget Action was denied by "+who)
		}
		m.t.EmergencyGranted, m.t.Blocked = true, ""
		return m.emit("task_emergency_granted", map[string]any{"action_id": a.ID, "by": clip(who)})
	})
}
