package store

import (
	"context"
	"errors"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

const (
	maxLeaseTTL     = 24 * time.Hour
	maxCapabilities = 64 << 10
)

// GrantLease mints a lease in the current epoch. Its expiry is on the
// database's clock, like every check of it.
func (p *Postgres) GrantLease(ctx context.Context, req LeaseGrant) (Lease, error) {
	if req.TTL <= 0 || req.TTL > maxLeaseTTL {
		return Lease{}, invalid("lease ttl must be in (0, %s]", maxLeaseTTL)
	}
	caps, err := checkJSONObject("capabilities", req.Capabilities, maxCapabilities)
	if err != nil {
		return Lease{}, err
	}
	var out Lease
	err = p.mutate(ctx, "grant_lease", onEpisode(req.EpisodeID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(req.Epoch); err != nil {
			return err
		}
		l := Lease{ID: newID(), EpisodeID: m.ep.ID, Epoch: m.ep.Epoch, Capabilities: caps,
			CreatedAt: m.now, ExpiresAt: m.now.Add(req.TTL)}
		m.write(`INSERT INTO leases (`+leaseCols+`) VALUES ($1, $2, $3, $4, $5, $6, NULL, NULL)`,
			l.ID, l.EpisodeID, l.Epoch, l.Capabilities, l.CreatedAt, l.ExpiresAt)
		m.emit("lease_granted", map[string]any{"lease_id": l.ID, "lease_epoch": l.Epoch,
			"expires_at": l.ExpiresAt, "capabilities_digest": digestOf(caps)})
		out = l
		return nil
	})
	return out, err
}

// RevokeLease revokes a lease; revoking a revoked lease changes nothing.
func (p *Postgres) RevokeLease(ctx context.Context, id uuid.UUID, reason string) (Lease, error) {
	var out Lease
	err := p.mutate(ctx, "revoke_lease", onRow("leases", "lease", id), func(m *mtx) error {
		l, err := lockLease(m, id, "FOR UPDATE")
		if err != nil {
			return err
		}
		if l.RevokedAt == nil {
			l.RevokedAt, l.RevokeReason = &m.now, clip(reason)
			if l.RevokeReason == "" {
				l.RevokeReason = "revoked"
			}
			m.write(`UPDATE leases SET revoked_at = $2, revoke_reason = $3 WHERE id = $1`, l.ID, m.now, l.RevokeReason)
			m.emit("lease_revoked", map[string]any{"lease_id": l.ID, "reason": l.RevokeReason})
		}
		out = l
		return nil
	})
	return out, err
}

// Lease reads a lease.
func (p *Postgres) Lease(ctx context.Context, id uuid.UUID) (Lease, error) {
	var out Lease
	err := p.query(ctx, "lease", func(tx querier) error {
		var err error
		out, err = scanLease(tx.QueryRow(ctx, `SELECT `+leaseCols+` FROM leases WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("lease")
		}
		return err
	})
	return out, err
}

// LeaseInEpisode reads an episode (without its spec) and a lease in one
// round trip: the broker's read-only fence before a prepare, which the
// prepare's own transaction checks again under its locks. Two statements,
// pipelined; each reads its own snapshot, as two calls would. A missing
// episode or lease is not_found.
func (p *Postgres) LeaseInEpisode(ctx context.Context, episodeID, leaseID uuid.UUID) (Episode, Lease, error) {
	var ep Episode
	var l Lease
	err := p.query(ctx, "lease_in_episode", func(tx querier) error {
		var b pgx.Batch
		b.Queue(`SELECT `+episodeLockCols+` FROM episodes WHERE id = $1`, episodeID)
		b.Queue(`SELECT `+leaseCols+` FROM leases WHERE id = $1`, leaseID)
		br := tx.SendBatch(ctx, &b)
		defer br.Close()
		var err error
		if ep, err = scanEpisode(br.QueryRow(), false); errors.Is(err, pgx.ErrNoRows) {
			return notFound("episode")
		} else if err != nil {
			return err
		}
		if l, err = scanLease(br.QueryRow()); errors.Is(err, pgx.ErrNoRows) {
			return notFound("lease")
		} else if err != nil {
			return err
		}
		return br.Close()
	})
	return ep, l, err
}

// CreateDomain records a new execution domain and its first generation.
func (p *Postgres) CreateDomain(ctx context.Context, req NewDomain) (Domain, Generation, error) {
	var d Domain
	var g Generation
	err := p.mutate(ctx, "create_domain", onEpisode(req.EpisodeID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(req.Epoch); err != nil {
			return err
		}
		d = Domain{ID: newID(), EpisodeID: m.ep.ID, CreatedAt: m.now}
		g = Generation{DomainID: d.ID, Generation: 1, Epoch: m.ep.Epoch, State: GenerationLive, CreatedAt: m.now}
		m.write(`INSERT INTO domains (id, episode_id, created_at) VALUES ($1, $2, $3)`, d.ID, d.EpisodeID, m.now)
		m.write(`INSERT INTO domain_generations (`+generationCols+`) VALUES ($1, 1, $2, NULL, 'live', $3, NULL)`,
			d.ID, g.Epoch, m.now)
		body := map[string]any{"domain_id": d.ID, "generation": 1}
		if req.UnsafeLocal {
			body["unsafe_local"] = true
		}
		m.emit("domain_created", body)
		return nil
	})
	return d, g, err
}

func lockCurrentGeneration(m *mtx, domainID uuid.UUID) (Generation, error) {
	g, err := scanGeneration(m.tx.QueryRow(m.ctx, `SELECT `+generationCols+` FROM domain_generations
		WHERE domain_id = $1 ORDER BY generation DESC LIMIT 1 FOR UPDATE`, domainID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Generation{}, notFound("domain")
	}
	return g, err
}

// DestroyGeneration records that a generation's domain was destroyed (its
// cgroup proven empty by the launcher). Idempotent.
func (p *Postgres) DestroyGeneration(ctx context.Context, domainID uuid.UUID, generation int) (Generation, error) {
	var out Generation
	err := p.mutate(ctx, "destroy_generation", onRow("domains", "domain", domainID), func(m *mtx) error {
		g, err := lockCurrentGeneration(m, domainID)
		if err != nil {
			return err
		}
		if g.Generation != generation {
			return protocol.Errorf(protocol.CodeIllegalTransition, "generation %d is not the domain's current one", generation)
		}
		if g.State == GenerationLive {
			g.State, g.DestroyedAt = GenerationDestroyed, &m.now
			m.write(`UPDATE domain_generations SET state = 'destroyed', destroyed_at = $3
				WHERE domain_id = $1 AND generation = $2`, domainID, generation, m.now)
			m.emit("generation_destroyed", map[string]any{"domain_id": domainID, "generation": generation})
		}
		out = g
		return nil
	})
	return out, err
}

// NewGeneration starts the next generation of a domain whose current one is
// destroyed — never two live generations at once. Restoring from a
// checkpoint makes it the episode's current snapshot; only a stable
// checkpoint of this episode may be restored.
func (p *Postgres) NewGeneration(ctx context.Context, req NewGeneration) (Generation, error) {
	var out Generation
	err := p.mutate(ctx, "new_generation", onRow("domains", "domain", req.DomainID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(req.Epoch); err != nil {
			return err
		}
		cur, err := lockCurrentGeneration(m, req.DomainID)
		if err != nil {
			return err
		}
		if cur.State != GenerationDestroyed {
			return protocol.Errorf(protocol.CodeIllegalTransition, "current generation is still live")
		}
		if req.CheckpointID != nil {
			var stable bool
			err := m.tx.QueryRow(m.ctx, `SELECT stable FROM checkpoints WHERE id = $1 AND episode_id = $2`,
				*req.CheckpointID, m.ep.ID).Scan(&stable)
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("checkpoint")
			}
			if err != nil {
				return err
			}
			if !stable {
				return invalid("only a stable checkpoint may be restored")
			}
			m.ep.CurrentCheckpoint = req.CheckpointID
		}
		out = Generation{DomainID: req.DomainID, Generation: cur.Generation + 1, Epoch: m.ep.Epoch,
			CheckpointID: req.CheckpointID, State: GenerationLive, CreatedAt: m.now}
		m.write(`INSERT INTO domain_generations (`+generationCols+`) VALUES ($1, $2, $3, $4, 'live', $5, NULL)`,
			out.DomainID, out.Generation, out.Epoch, out.CheckpointID, m.now)
		m.emit("generation_started", map[string]any{"domain_id": out.DomainID, "generation": out.Generation,
			"checkpoint_id": out.CheckpointID})
		return nil
	})
	return out, err
}

// RecordCheckpoint records a checkpoint of the domain's live generation. Its
// parent is the episode's current snapshot and it becomes the current one.
func (p *Postgres) RecordCheckpoint(ctx context.Context, req NewCheckpoint) (Checkpoint, error) {
	if !digestPattern.MatchString(req.Digest) {
		return Checkpoint{}, invalid("checkpoint digest")
	}
	var out Checkpoint
	err := p.mutate(ctx, "record_checkpoint", onEpisode(req.EpisodeID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(req.Epoch); err != nil {
			return err
		}
		var domainEpisode uuid.UUID
		if err := m.tx.QueryRow(m.ctx, `SELECT episode_id FROM domains WHERE id = $1`, req.DomainID).Scan(&domainEpisode); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("domain")
			}
			return err
		}
		if domainEpisode != m.ep.ID {
			return notFound("domain")
		}
		g, err := lockCurrentGeneration(m, req.DomainID)
		if err != nil {
			return err
		}
		if g.Generation != req.Generation || g.State != GenerationLive {
			return protocol.Errorf(protocol.CodeIllegalTransition, "generation %d is not live", req.Generation)
		}
		c := Checkpoint{ID: newID(), EpisodeID: m.ep.ID, DomainID: req.DomainID, Generation: req.Generation,
			Epoch: m.ep.Epoch, Digest: req.Digest, ParentID: m.ep.CurrentCheckpoint, Stable: req.Stable, CreatedAt: m.now}
		m.write(`INSERT INTO checkpoints (`+checkpointCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			c.ID, c.EpisodeID, c.DomainID, c.Generation, c.Epoch, c.Digest, c.ParentID, c.Stable, m.now)
		m.ep.CurrentCheckpoint = &c.ID
		m.emit("checkpoint_recorded", map[string]any{"checkpoint_id": c.ID, "digest": c.Digest,
			"parent_id": c.ParentID, "domain_id": c.DomainID, "generation": c.Generation, "stable": c.Stable})
		out = c
		return nil
	})
	return out, err
}

// MarkCheckpointStable marks a checkpoint as a repair target. Stability is
// never withdrawn.
func (p *Postgres) MarkCheckpointStable(ctx context.Context, id uuid.UUID) (Checkpoint, error) {
	var out Checkpoint
	err := p.mutate(ctx, "mark_checkpoint_stable", onRow("checkpoints", "checkpoint", id), func(m *mtx) error {
		c, err := scanCheckpoint(m.tx.QueryRow(m.ctx, `SELECT `+checkpointCols+` FROM checkpoints WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		if !c.Stable {
			c.Stable = true
			m.write(`UPDATE checkpoints SET stable = true WHERE id = $1`, id)
			m.emit("checkpoint_stable", map[string]any{"checkpoint_id": id, "digest": c.Digest})
		}
		out = c
		return nil
	})
	return out, err
}

// LatestStableCheckpoint returns the newest stable checkpoint of an episode.
func (p *Postgres) LatestStableCheckpoint(ctx context.Context, episodeID uuid.UUID) (Checkpoint, error) {
	var out Checkpoint
	err := p.query(ctx, "latest_stable_checkpoint", func(tx querier) error {
		var err error
		out, err = scanCheckpoint(tx.QueryRow(ctx, `SELECT `+checkpointCols+` FROM checkpoints
			WHERE episode_id = $1 AND stable ORDER BY created_at DESC, id DESC LIMIT 1`, episodeID))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("stable checkpoint")
		}
		return err
	})
	return out, err
}
