package store

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

const maxSpec = 1 << 20

// CreateEpisode creates an active episode at epoch 1, owned by this
// instance for OwnerTTL.
func (p *Postgres) CreateEpisode(ctx context.Context, req NewEpisode) (Episode, error) {
	spec, err := checkJSONObject("spec", req.Spec, maxSpec)
	if err != nil {
		return Episode{}, err
	}
	if req.PolicyVersion < 0 {
		return Episode{}, invalid("policy version must not be negative")
	}
	id := req.ID
	if id == uuid.Nil {
		id = newID()
	}
	var out Episode
	err = p.run(ctx, "create_episode", pgx.TxOptions{}, func(tx pgx.Tx) error {
		var now time.Time
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			return err
		}
		now = now.UTC()
		ep := Episode{
			ID: id, Spec: spec, State: EpisodeActive, Epoch: 1, PolicyVersion: req.PolicyVersion,
			Owner:     Ownership{EpisodeID: id, InstanceID: p.instance, Process: p.process, Token: 1, ExpiresAt: now.Add(p.ownerTTL)},
			CreatedAt: now, UpdatedAt: now,
		}
		// Insert with the genesis head; flush advances it with the
		// creation event in the same transaction.
		_, err := tx.Exec(ctx, `INSERT INTO episodes (`+episodeCols+`) VALUES ($2, $1, $3, $4, $5, NULL, $6, $7, $8, 0, $9, $10, $10, $11)`,
			ep.ID, spec, string(ep.State), ep.Epoch, ep.PolicyVersion, ep.Owner.InstanceID, ep.Owner.Token,
			ep.Owner.ExpiresAt, ep.LedgerHead.Hash[:], now, p.process)
		if err != nil {
			if isUniqueViolation(err) {
				return protocol.Errorf(protocol.CodeInvalidField, "episode id already exists")
			}
			return err
		}
		m := &mtx{ctx: ctx, tx: tx, ep: ep, now: now}
		m.write(`INSERT INTO epochs (episode_id, epoch, reason, created_at) VALUES ($1, 1, 'created', $2)`, id, now)
		m.emit("episode_created", map[string]any{
			"spec_digest": digestOf(spec), "policy_version": ep.PolicyVersion,
			"owner": ep.Owner.InstanceID, "owner_token": ep.Owner.Token,
		})
		if err := m.flush(); err != nil {
			return err
		}
		out = m.ep
		return nil
	})
	return out, err
}

// Episode reads an episode.
func (p *Postgres) Episode(ctx context.Context, id uuid.UUID) (Episode, error) {
	var ep Episode
	err := p.query(ctx, "episode", func(tx querier) error {
		var err error
		ep, err = scanEpisode(tx.QueryRow(ctx, `SELECT `+episodeCols+` FROM episodes WHERE id = $1`, id), true)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("episode")
		}
		return err
	})
	return ep, err
}

// EndEpisode moves an active episode to completed, contained or aborted.
// Ending is final.
func (p *Postgres) EndEpisode(ctx context.Context, req EndEpisode) (Episode, error) {
	switch req.State {
	case EpisodeCompleted, EpisodeContained, EpisodeAborted:
	default:
		return Episode{}, invalid("episode cannot end in state %q", req.State)
	}
	var out Episode
	err := p.mutate(ctx, "end_episode", onEpisode(req.EpisodeID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return protocol.Errorf(protocol.CodeIllegalTransition, "episode is already %s", m.ep.State)
		}
		if err := m.requireEpoch(req.Epoch); err != nil {
			return err
		}
		// An ended episode holds no authority: effects before the horizon
		// are aborted and leases revoked with it. Effects past the horizon
		// stay for reconciliation.
		rows, err := m.tx.Query(m.ctx, `UPDATE effects SET state = 'aborted', updated_at = $2
			WHERE episode_id = $1 AND state = ANY($3) RETURNING id`, m.ep.ID, m.now, abortableBeforeHorizon())
		if err != nil {
			return err
		}
		aborted, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		rows, err = m.tx.Query(m.ctx, `UPDATE leases SET revoked_at = $2, revoke_reason = 'episode_ended'
			WHERE episode_id = $1 AND revoked_at IS NULL RETURNING id`, m.ep.ID, m.now)
		if err != nil {
			return err
		}
		revoked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		m.ep.State = req.State
		m.emit("episode_ended", map[string]any{"state": string(req.State), "reason": clip(req.Reason),
			"aborted_effects": nonNil(aborted), "revoked_leases": nonNil(revoked)})
		out = m.ep
		return nil
	})
	return out, err
}

// SetPolicyVersion records a new policy version; versions only increase.
func (p *Postgres) SetPolicyVersion(ctx context.Context, episodeID uuid.UUID, epoch, version int64) (Episode, error) {
	var out Episode
	err := p.mutate(ctx, "set_policy_version", onEpisode(episodeID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(epoch); err != nil {
			return err
		}
		if version <= m.ep.PolicyVersion {
			return invalid("policy version %d does not increase %d", version, m.ep.PolicyVersion)
		}
		from := m.ep.PolicyVersion
		m.ep.PolicyVersion = version
		m.emit("policy_version_set", map[string]any{"from": from, "to": version})
		out = m.ep
		return nil
	})
	return out, err
}

// AcquireOwnership takes or renews this process's ownership lease on an
// episode. It succeeds when this process holds it already, when the
// current holder's lease has expired by the database's clock, or when the
// holder is an older process of this same instance (an overlapping
// restart: the newer process fences the older at once, and the older can
// never take it back while the newer's lease is live); the token
// increases whenever the owner changes.
func (p *Postgres) AcquireOwnership(ctx context.Context, id uuid.UUID) (Ownership, error) {
	var out Ownership
	err := p.run(ctx, "acquire_ownership", pgx.TxOptions{}, func(tx pgx.Tx) error {
		ep, now, err := lockEpisode(ctx, tx, id)
		if err != nil {
			return err
		}
		prev := ep.Owner
		mine := prev.InstanceID == p.instance && prev.Process == p.process
		if !mine && now.Before(prev.ExpiresAt) {
			if prev.InstanceID != p.instance {
				return stale("episode is owned by another kernel instance")
			}
			// UUIDv7s order by when their handles opened.
			if bytes.Compare(prev.Process[:], p.process[:]) >= 0 {
				return stale("episode is owned by a newer process of this kernel instance")
			}
		}
		m := &mtx{ctx: ctx, tx: tx, ep: ep, now: now}
		if !mine {
			m.ep.Owner.Token++
			m.ep.Owner.InstanceID, m.ep.Owner.Process = p.instance, p.process
			m.emit("ownership_taken", map[string]any{
				"owner": p.instance, "token": m.ep.Owner.Token, "previous": prev.InstanceID,
				"process": p.process, "previous_process": prev.process(),
			})
		} else if !now.Before(prev.ExpiresAt) {
			// The same process coming back after expiry: nobody took
			// over in between, but the gap is worth a record.
			m.emit("ownership_renewed_after_expiry", map[string]any{"owner": p.instance, "token": m.ep.Owner.Token})
		}
		// Plain renewals are not ledger events: they would flood the
		// ledger with heartbeats. They still write the episode row.
		m.ep.Owner.ExpiresAt = now.Add(p.ownerTTL)
		if len(m.events) == 0 {
			_, err := tx.Exec(ctx, `UPDATE episodes SET owner_expires_at = $2 WHERE id = $1`, id, m.ep.Owner.ExpiresAt)
			out = m.ep.Owner
			return err
		}
		if err := m.flush(); err != nil {
			return err
		}
		out = m.ep.Owner
		return nil
	})
	return out, err
}

// ReleaseOwnership gives the episode up now, so another instance need not
// wait for the TTL.
func (p *Postgres) ReleaseOwnership(ctx context.Context, id uuid.UUID) error {
	return p.mutate(ctx, "release_ownership", onEpisode(id), func(m *mtx) error {
		m.ep.Owner.ExpiresAt = m.now
		m.emit("ownership_released", map[string]any{"owner": p.instance, "token": m.ep.Owner.Token})
		return nil
	})
}

// AdvanceEpoch fences an episode's authority in one transaction: epoch+1,
// every lease of an older epoch revoked, every effect of an older epoch
// before commit_intent staled, lineage and events recorded. Effects at or
// beyond commit_intent are left alone and reported: an adapter may have
// acted on them, so only reconciliation may settle them.
func (p *Postgres) AdvanceEpoch(ctx context.Context, req AdvanceEpoch) (EpochAdvance, error) {
	var out EpochAdvance
	err := p.mutate(ctx, "advance_epoch", onEpisode(req.EpisodeID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(req.FromEpoch); err != nil {
			return err
		}
		if req.CheckpointID != nil {
			var ok bool
			err := m.tx.QueryRow(m.ctx, `SELECT EXISTS (SELECT 1 FROM checkpoints WHERE id = $1 AND episode_id = $2)`,
				*req.CheckpointID, m.ep.ID).Scan(&ok)
			if err != nil {
				return err
			}
			if !ok {
				return notFound("checkpoint")
			}
		}
		from, to := m.ep.Epoch, m.ep.Epoch+1
		// Lock order episode → effects → leases, as in BeginCommit.
		rows, err := m.tx.Query(m.ctx, `UPDATE effects SET state = 'stale', updated_at = $3
			WHERE episode_id = $1 AND epoch < $2 AND state = ANY($4) RETURNING id`,
			m.ep.ID, to, m.now, statesThatCan(Stale))
		if err != nil {
			return err
		}
		if out.StaledEffects, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
			return err
		}
		rows, err = m.tx.Query(m.ctx, `SELECT id FROM effects WHERE episode_id = $1 AND epoch < $2 AND state = ANY($3)`,
			m.ep.ID, to, unsettledStates())
		if err != nil {
			return err
		}
		if out.Unsettled, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
			return err
		}
		rows, err = m.tx.Query(m.ctx, `UPDATE leases SET revoked_at = $3, revoke_reason = 'epoch_advanced'
			WHERE episode_id = $1 AND epoch < $2 AND revoked_at IS NULL RETURNING id`, m.ep.ID, to, m.now)
		if err != nil {
			return err
		}
		if out.RevokedLeases, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
			return err
		}
		out.Lineage = Lineage{ID: newID(), EpisodeID: m.ep.ID, FromEpoch: from, ToEpoch: to,
			CheckpointID: req.CheckpointID, Reason: clip(req.Reason), CreatedAt: m.now}
		m.write(`INSERT INTO epochs (episode_id, epoch, reason, created_at) VALUES ($1, $2, $3, $4)`,
			m.ep.ID, to, out.Lineage.Reason, m.now)
		m.write(`INSERT INTO recovery_lineage (`+lineageCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			out.Lineage.ID, m.ep.ID, from, to, req.CheckpointID, out.Lineage.Reason, m.now)
		m.ep.Epoch = to
		m.emit("epoch_advanced", map[string]any{
			"from": from, "to": to, "reason": out.Lineage.Reason, "checkpoint": req.CheckpointID,
			"lineage_id": out.Lineage.ID, "revoked_leases": nonNil(out.RevokedLeases),
			"staled_effects": nonNil(out.StaledEffects), "unsettled_effects": nonNil(out.Unsettled),
		})
		return nil
	})
	return out, err
}

// Lineage lists an episode's recovery lineage, oldest first.
func (p *Postgres) Lineage(ctx context.Context, id uuid.UUID) ([]Lineage, error) {
	var out []Lineage
	err := p.query(ctx, "lineage", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT `+lineageCols+` FROM recovery_lineage WHERE episode_id = $1 ORDER BY from_epoch`, id)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lineage, error) { return scanLineage(r) })
		return err
	})
	return out, err
}

// statesThatCan lists the states from which the table allows to.
func statesThatCan(to EffectState) []string {
	var out []string
	for _, s := range States() {
		if CanTransition(s, to) {
			out = append(out, string(s))
		}
	}
	return out
}

func abortableBeforeHorizon() []string {
	var out []string
	for _, s := range States() {
		if s.PreIntent() && CanTransition(s, Aborted) {
			out = append(out, string(s))
		}
	}
	return out
}

func unsettledStates() []string {
	var out []string
	for _, s := range States() {
		if s.Unsettled() {
			out = append(out, string(s))
		}
	}
	return out
}

func nonNil(ids []uuid.UUID) []uuid.UUID {
	if ids == nil {
		return []uuid.UUID{}
	}
	return ids
}

// clip bounds free text the kernel passes in (reasons), so the ledger
// cannot be bloated through it.
func clip(s string) string {
	if len(s) > maxTextField {
		s = s[:maxTextField]
	}
	// PostgreSQL text refuses NUL and invalid UTF-8; a cut may split a
	// rune.
	return strings.ReplaceAll(strings.ToValidUTF8(s, ""), "\x00", "")
}

// ActiveEpisodes lists the episodes still active, oldest first, with their
// specs: what a kernel starting up must resume or contain.
func (p *Postgres) ActiveEpisodes(ctx context.Context) ([]Episode, error) {
	var out []Episode
	err := p.query(ctx, "active_episodes", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT `+episodeCols+` FROM episodes WHERE state = 'active' ORDER BY created_at, id`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Episode, error) { return scanEpisode(r, true) })
		return err
	})
	return out, err
}
