package store

import (
	"context"
	"errors"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// BeginCommit is the commit horizon. In one transaction it locks episode →
// effect → lease FOR UPDATE (always in that order: AdvanceEpoch takes the
// episode first too, so the two can neither interleave nor deadlock),
// re-reads them, runs the store's own checks, hands the view to check for
// the broker's, and records commit_intent only if every check passed.
//
// The store's checks: the effect is ready and at the requested revision;
// the episode is active; the request's epoch, the effect's epoch and the
// lease's epoch are all the current epoch; the lease is the effect's, not
// revoked and not expired; the effect has not expired; the version vector
// captured at prepare names this episode, epoch, lease and revision; and the
// current snapshot descends from the prepared one. Failures are
// stale_request_epoch, stale_authority or illegal_transition.
func (p *Postgres) BeginCommit(ctx context.Context, req CommitRequest, check CommitCheck) (CommitView, error) {
	if check == nil {
		return CommitView{}, invalid("commit check is required")
	}
	var view CommitView
	err := p.mutate(ctx, "begin_commit", commitTarget(req), beginCommitFn(ctx, req, check, &view))
	if err != nil {
		return CommitView{}, err
	}
	return view, nil
}

// EnterCommit is BeginCommit and then, when it succeeded, the move to
// committing (Transition's, with the same checks), as two transactions —
// commit_intent lossy, committing durable, as doc.go requires — on one
// connection, committing's BEGIN and locks pipelined behind
// commit_intent's COMMIT: one round trip fewer than the two calls.
// afterIntent (nil in production) runs between them. The view returned
// holds the effect at committing; an error leaves it at commit_intent (or
// short of it), which reconciliation aborts.
func (p *Postgres) EnterCommit(ctx context.Context, req CommitRequest, check CommitCheck, afterIntent func(CommitView)) (CommitView, error) {
	if check == nil {
		return CommitView{}, invalid("commit check is required")
	}
	var view CommitView
	return p.enterCommit(ctx, commitTarget(req), req.EffectID, func(m *mtx) (CommitRequest, error) {
		return req, beginCommitFn(ctx, req, check, &view)(m)
	}, &view, afterIntent)
}

// EnterCommitInEpisode is EnterCommit for the worker of episodeID with the
// broker's ownership read (EffectInEpisode) folded into commit_intent's
// transaction, one round trip fewer: under the locks, first the request's
// epoch must be the episode's current one (stale_request_epoch), then the
// effect must be the episode's (not_found) — EffectInEpisode's answers, in
// its order. plan then runs on the effect as locked and returns the
// request and the check; BeginCommit's checks follow, unchanged. An error
// from plan ends the transaction with nothing written.
func (p *Postgres) EnterCommitInEpisode(ctx context.Context, episodeID, effectID uuid.UUID, epoch int64,
	plan func(Effect) (CommitRequest, CommitCheck, error), afterIntent func(CommitView)) (CommitView, error) {
	// commit_intent's locks and reads, on the worker's episode, the
	// effect only if it is that episode's.
	tg := commitTarget(CommitRequest{EffectID: effectID})
	tg.via, tg.id, tg.what, tg.effectID = "", episodeID, "episode", effectID
	var view CommitView
	return p.enterCommit(ctx, tg, effectID, func(m *mtx) (CommitRequest, error) {
		if err := m.requireEpoch(epoch); err != nil {
			return CommitRequest{}, err
		}
		e, ok := m.locked[effectID]
		if !ok {
			return CommitRequest{}, notFound("effect")
		}
		req, check, err := plan(e)
		if err != nil {
			return CommitRequest{}, err
		}
		if req.EffectID != effectID || req.Epoch != epoch {
			return CommitRequest{}, invalid("a commit plan names another effect or epoch than its request")
		}
		if check == nil {
			return CommitRequest{}, invalid("commit check is required")
		}
		return req, beginCommitFn(ctx, req, check, &view)(m)
	}, &view, afterIntent)
}

// enterCommit runs first (commit_intent) on tg and then committing on the
// effect, as EnterCommit describes; view is what first filled in.
func (p *Postgres) enterCommit(ctx context.Context, tg target, effectID uuid.UUID, first func(*mtx) (CommitRequest, error),
	view *CommitView, afterIntent func(CommitView)) (CommitView, error) {
	var between func()
	if afterIntent != nil {
		between = func() { afterIntent(*view) }
	}
	var committing Effect
	tr := Transition{EffectID: effectID, To: Committing}
	// The revision committing is checked against is the one commit_intent
	// was recorded at, as the broker's separate call passed it.
	err := p.mutateThen(ctx, "begin_commit", tg, func(m *mtx) error {
		req, err := first(m)
		tr.Revision, tr.Epoch = req.Revision, req.Epoch
		return err
	}, between, "effect_transition", transitionTarget(tr), func(m *mtx) error { return transitionFn(tr, &committing)(m) })
	if err != nil {
		return CommitView{}, err
	}
	view.Effect = committing
	return *view, nil
}

func commitTarget(req CommitRequest) target {
	// All three locks, the decisions and the spend in the first round trip.
	tg := onEffect(req.EffectID)
	// commit_intent may be lost in a database crash: no adapter acts
	// before committing is durable, and its flush carries this commit.
	tg.leaseMode, tg.decisions, tg.spend, tg.lossy = "FOR UPDATE", true, true, true
	return tg
}

func beginCommitFn(ctx context.Context, req CommitRequest, check CommitCheck, view *CommitView) func(*mtx) error {
	return func(m *mtx) error {
		e, err := lockEffect(m, req.EffectID)
		if err != nil {
			return err
		}
		if err := checkTransition(e.State, CommitIntent); err != nil {
			return err
		}
		if err := m.forward(e, req.Epoch, req.Revision); err != nil {
			return err
		}
		vv := e.VersionVector
		if vv == nil || vv.EpisodeID != m.ep.ID || vv.Epoch != e.Epoch || vv.LeaseID != e.LeaseID || vv.EffectRevision != e.Revision {
			return stale("version vector does not match the effect")
		}
		l, err := lockLease(m, e.LeaseID, "FOR UPDATE")
		if err != nil {
			return err
		}
		if err := l.live(m.ep.Epoch, m.now); err != nil {
			return err
		}
		ok, err := descends(m, m.ep.CurrentCheckpoint, vv.SnapshotAncestry)
		if err != nil {
			return err
		}
		if !ok {
			return stale("current snapshot does not descend from the prepared one")
		}
		decisions := m.decisions
		if decisions == nil {
			decisions = []Decision{}
		}
		spent := m.spent
		*view = CommitView{Episode: m.ep, Effect: e, Lease: l, Decisions: decisions, Now: m.now, Spent: spent}
		if e.AwaitsHuman() {
			a, err := scanAction(m.tx.QueryRow(m.ctx, `SELECT `+actionCols+` FROM actions WHERE effect_id = $1 AND revision = $2 AND epoch = $3`,
				e.ID, e.Revision, e.Epoch))
			switch {
			case err == nil:
				view.Action = &a
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		if err := check(ctx, *view); err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) {
				return err
			}
			return protocol.Errorf(protocol.CodeStaleAuthority, "commit check: %w", err)
		}
		if err := recordSpend(m, e, req.Bytes); err != nil {
			return err
		}
		e.CommitIntentAt = &m.now
		if err := m.saveEffect(&e, CommitIntent, map[string]any{"lease_id": l.ID, "policy_version": m.ep.PolicyVersion}); err != nil {
			return err
		}
		view.Effect = e
		return nil
	}
}

// descends reports whether checkpoint cur is prepared or one of its
// descendants. A nil prepared ancestry is the root every snapshot descends
// from.
func descends(m *mtx, cur, prepared *uuid.UUID) (bool, error) {
	if prepared == nil {
		return true, nil
	}
	if cur == nil {
		return false, nil
	}
	if *cur == *prepared {
		return true, nil
	}
	var ok bool
	err := m.tx.QueryRow(m.ctx, `WITH RECURSIVE anc (id, parent_id, depth) AS (
			SELECT id, parent_id, 0 FROM checkpoints WHERE id = $1
			UNION ALL
			SELECT c.id, c.parent_id, a.depth + 1 FROM checkpoints c JOIN anc a ON c.id = a.parent_id
			WHERE a.depth < 10000
		) SELECT EXISTS (SELECT 1 FROM anc WHERE id = $2)`, *cur, *prepared).Scan(&ok)
	return ok, err
}

// FinishCommit records how the adapter's commit ended — committed,
// commit_unknown or failed — with its receipt, or how reconciliation
// settled a commit_unknown. committed requires committing first (the
// broker marks it just before the adapter acts), so after a crash an effect
// still at commit_intent is known never to have reached its adapter. Neither an
// epoch advance nor the end of the episode prevents it: the world changed
// (or may have), and the record must say so.
func (p *Postgres) FinishCommit(ctx context.Context, req Outcome) (Effect, error) {
	switch req.State {
	case Committed, CommitUnknown, Failed:
	default:
		return Effect{}, invalid("%s is not a commit outcome", req.State)
	}
	receipt, err := checkJSONObject("receipt", req.Receipt, maxTarget)
	if err != nil {
		return Effect{}, err
	}
	var out Effect
	err = p.mutate(ctx, "finish_commit", onEffect(req.EffectID), func(m *mtx) error {
		e, err := lockEffect(m, req.EffectID)
		if err != nil {
			return err
		}
		if err := checkTransition(e.State, req.State); err != nil {
			return err
		}
		e.OutcomeAt = &m.now
		e.Receipt = receipt
		if err := m.saveEffect(&e, req.State, map[string]any{"receipt_digest": digestOf(receipt)}); err != nil {
			return err
		}
		out = e
		return nil
	})
	return out, err
}

// Unsettled lists effects an adapter may have acted on without a recorded
// outcome (commit_intent, committing, commit_unknown), oldest first, for
// reconciliation after a restart. uuid.Nil lists every episode's.
func (p *Postgres) Unsettled(ctx context.Context, episodeID uuid.UUID) ([]Effect, error) {
	var out []Effect
	err := p.query(ctx, "unsettled", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT `+effectCols+` FROM effects
			WHERE state = ANY($1) AND ($2::uuid IS NULL OR episode_id = $2) ORDER BY commit_intent_at, id`,
			unsettledStates(), nullUUID(episodeID))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Effect, error) { return scanEffect(r) })
		return err
	})
	return out, err
}

func nullUUID(id uuid.UUID) any {
	if id == uuid.Nil {
		return nil
	}
	return id
}
