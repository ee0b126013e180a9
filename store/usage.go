package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// PrepareUsage reports how many prepares an episode's effects record (a
// proposal is one, each revision one more) and the payload digests their
// current revisions name. The broker's per-episode quotas start from it.
func (p *Postgres) PrepareUsage(ctx context.Context, episodeID uuid.UUID) (int64, []string, error) {
	var n int64
	var digests []string
	err := p.query(ctx, "prepare_usage", func(tx querier) error {
		if err := tx.QueryRow(ctx, `SELECT COALESCE(SUM(revision), 0) FROM effects WHERE episode_id = $1`, episodeID).Scan(&n); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT DISTINCT payload_digest FROM effects WHERE episode_id = $1`, episodeID)
		if err != nil {
			return err
		}
		digests, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return n, digests, err
}

// HeldPayloads lists the payload and response-body digests the broker must
// keep: those of effects at or beyond commit_intent and not settled
// (reconciliation reads them), of effects of active episodes that have not
// reached a final state, and of every effect that changed after cutoff.
// Everything else — settled effects and effects of ended episodes, once
// cutoff has passed them — may be removed.
func (p *Postgres) HeldPayloads(ctx context.Context, cutoff time.Time) (map[string]bool, error) {
	held := map[string]bool{}
	err := p.query(ctx, "held_payloads", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT e.payload_digest, COALESCE(e.receipt->>'response_digest', '')
			FROM effects e JOIN episodes ep ON ep.id = e.episode_id
			WHERE e.state IN ('commit_intent', 'committing', 'commit_unknown')
			   OR (ep.state = 'active' AND e.state IN ('proposed', 'prepared', 'evaluating', 'ready'))
			   OR e.updated_at >= $1`, cutoff)
		if err != nil {
			return err
		}
		var d, r string
		_, err = pgx.ForEachRow(rows, []any{&d, &r}, func() error {
			held[d] = true
			if r != "" {
				held[r] = true
			}
			return nil
		})
		return err
	})
	return held, err
}
