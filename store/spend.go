package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Spend is an episode's durable budget spend: every effect that reached
// commit_intent, whatever its outcome (an attempt that may have acted has
// spent). BeginCommit reads it under the episode's row lock and records
// the new commit's spend in the same transaction, so concurrent commits of
// one episode see each other's spend and cannot both take the last byte.
type Spend struct {
	Bytes   int64 // bytes of every effect committed (or attempted) so far
	Effects int64 // effects so far
	// LastMinute counts effects whose commit_intent is less than a minute
	// old by the database's clock.
	LastMinute int64
}

// SpendWindow is the window of Spend.LastMinute (effects_per_minute).
const SpendWindow = time.Minute

func readSpend(m *mtx) (Spend, error) {
	var s Spend
	err := m.tx.QueryRow(m.ctx, `SELECT COALESCE(sum(bytes), 0), count(*), count(*) FILTER (WHERE at > $2)
		FROM effect_spend WHERE episode_id = $1`, m.ep.ID, m.now.Add(-SpendWindow)).Scan(&s.Bytes, &s.Effects, &s.LastMinute)
	return s, err
}

func recordSpend(m *mtx, e Effect, bytes int64) error {
	if bytes < 0 {
		return invalid("commit bytes must not be negative")
	}
	m.write(`INSERT INTO effect_spend (effect_id, episode_id, lease_id, bytes, at) VALUES ($1, $2, $3, $4, $5)`,
		e.ID, m.ep.ID, e.LeaseID, bytes, m.now)
	return nil
}

// Spend implements Store.
func (p *Postgres) Spend(ctx context.Context, episodeID uuid.UUID) (Spend, error) {
	var s Spend
	err := p.query(ctx, "spend", func(tx querier) error {
		return tx.QueryRow(ctx, `SELECT COALESCE(sum(bytes), 0), count(*), count(*) FILTER (WHERE at > clock_timestamp() - $2 * interval '1 second')
			FROM effect_spend WHERE episode_id = $1`, episodeID, int64(SpendWindow/time.Second)).Scan(&s.Bytes, &s.Effects, &s.LastMinute)
	})
	return s, err
}
