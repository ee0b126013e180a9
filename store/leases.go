package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Leases: capability grants bound to an episode's epoch. A lease is minted
// only in the current epoch and its expiry is on the database's clock;
// every check of it (prepare, commit) re-reads it under the mutation's
// locks.

// LeaseGrant mints a lease in the current epoch.
type LeaseGrant struct {
	EpisodeID    uuid.UUID
	Epoch        int64
	Capabilities json.RawMessage
	TTL          time.Duration
}

// Lease is a capability grant bound to an epoch.
type Lease struct {
	ID           uuid.UUID
	EpisodeID    uuid.UUID
	Epoch        int64
	Capabilities json.RawMessage
	CreatedAt    time.Time
	ExpiresAt    time.Time
	RevokedAt    *time.Time
	RevokeReason string
}

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

// lockLease returns the lease the mutation locked in its first round trip,
// or locks it now in mode.
func lockLease(m *mtx, id uuid.UUID, mode string) (Lease, error) {
	if m.lease != nil && m.lease.ID == id {
		return *m.lease, nil
	}
	l, err := scanLease(m.tx.QueryRow(m.ctx, `SELECT `+leaseCols+` FROM leases WHERE id = $1 AND episode_id = $2 `+mode, id, m.ep.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, notFound("lease")
	}
	return l, err
}
