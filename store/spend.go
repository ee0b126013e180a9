package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Spend is an episode's durable budget spend: every effect that reached
// commit_intent, whatever its outcome (an attempt that may have acted has
// spent; a commit_intent a database crash lost had not acted: see
// "Durability" in doc.go). BeginCommit reads it under the episode's row lock and records
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

// spendSQL reads the spend of the episode episode (an SQL expression of
// $1) and the database clock it is counted against, once (a volatile CTE
// is evaluated once). begin sends it right behind the episode's lock
// statement, so it reads under the lock (READ COMMITTED: its snapshot is
// taken once the lock is held) in the same round trip, and that clock
// becomes the transaction's now. The totals are episode_spend's, kept by
// the database as effect_spend rows are written (migration 0006); only
// the last minute's rows are counted, so a commit costs the same however
// many effects its episode made before.
func spendSQL(episode string) string {
	return `WITH c AS (SELECT clock_timestamp() AS now)
	SELECT c.now, COALESCE(t.bytes, 0), COALESCE(t.effects, 0),
		(SELECT count(*) FROM effect_spend s WHERE s.episode_id = ` + episode + `
			AND s.at > c.now - $2::bigint * interval '1 microsecond')
	FROM c LEFT JOIN episode_spend t ON t.episode_id = ` + episode
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
	var now time.Time
	err := p.query(ctx, "spend", func(tx querier) error {
		return tx.QueryRow(ctx, spendSQL(`$1::uuid`), episodeID, SpendWindow.Microseconds()).Scan(&now, &s.Bytes, &s.Effects, &s.LastMinute)
	})
	return s, err
}
