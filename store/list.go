package store

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// MaxList caps how many rows one list call returns, so an operator query
// can never make the kernel read an unbounded table into memory.
const MaxList = 1000

// ListEpisodes reads up to limit episodes, newest first, without their
// specs. It is a read-only operator view; nothing in the authority path
// depends on it.
func (p *Postgres) ListEpisodes(ctx context.Context, limit int) ([]Episode, error) {
	limit = clampList(limit)
	var out []Episode
	err := p.query(ctx, "list_episodes", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT `+episodeLockCols+` FROM episodes ORDER BY created_at DESC, id DESC LIMIT $1`, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Episode, error) { return scanEpisode(r, false) })
		return err
	})
	return out, err
}

// ListEffects reads up to limit effects of one episode, oldest first.
func (p *Postgres) ListEffects(ctx context.Context, episodeID uuid.UUID, limit int) ([]Effect, error) {
	limit = clampList(limit)
	var out []Effect
	err := p.query(ctx, "list_effects", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT `+effectCols+` FROM effects WHERE episode_id = $1 ORDER BY created_at, id LIMIT $2`, episodeID, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Effect, error) { return scanEffect(r) })
		return err
	})
	return out, err
}

func clampList(n int) int {
	if n <= 0 || n > MaxList {
		return MaxList
	}
	return n
}

// Decisions lists every decision recorded on an effect, all revisions, in
// the order they were made (operator views; the commit check reads only
// the current revision's, in its own transaction).
func (p *Postgres) Decisions(ctx context.Context, effectID uuid.UUID) ([]Decision, error) {
	var out []Decision
	err := p.query(ctx, "list_decisions", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT `+decisionCols+` FROM decisions WHERE effect_id = $1 ORDER BY created_at, id LIMIT $2`, effectID, MaxList)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Decision, error) { return scanDecision(r) })
		return err
	})
	return out, err
}
