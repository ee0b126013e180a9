package store

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/autonomic-kernel/autonomic/store/ledger"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Events reads an episode's ledger in sequence order.
func (p *Postgres) Events(ctx context.Context, episodeID uuid.UUID) ([]ledger.Entry, error) {
	var out []ledger.Entry
	err := p.query(ctx, "events", func(tx querier) error {
		var err error
		out, err = readEvents(ctx, tx, episodeID)
		return err
	})
	return out, err
}

func readEvents(ctx context.Context, tx querier, episodeID uuid.UUID) ([]ledger.Entry, error) {
	rows, err := tx.Query(ctx, `SELECT episode_id, seq, epoch, kind, body, at, prev_hash, hash
		FROM events WHERE episode_id = $1 ORDER BY seq`, episodeID)
	if err != nil {
		return nil, err
	}
	return collectEntries(rows)
}

// collectEntries scans ledger rows (an episode's or a task's).
func collectEntries(rows pgx.Rows) ([]ledger.Entry, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Entry, error) {
		var e ledger.Entry
		var body string
		var prev, hash []byte
		if err := r.Scan(&e.EpisodeID, &e.Seq, &e.Epoch, &e.Kind, &body, &e.At, &prev, &hash); err != nil {
			return e, err
		}
		e.Body = json.RawMessage(body)
		e.At = e.At.UTC()
		// A wrong-length hash cannot match; leaving it zero lets Verify
		// report the link instead of failing the read.
		if len(prev) == len(e.Prev) {
			copy(e.Prev[:], prev)
		}
		if len(hash) == len(e.Hash) {
			copy(e.Hash[:], hash)
		}
		return e, nil
	})
}

// VerifyLedger recomputes an episode's chain from content, in one snapshot
// together with the head recorded on the episode, and reports the first
// broken link.
func (p *Postgres) VerifyLedger(ctx context.Context, episodeID uuid.UUID) (ledger.Report, error) {
	var rep ledger.Report
	err := p.read(ctx, "verify_ledger", func(tx pgx.Tx) error {
		ep, err := scanEpisode(tx.QueryRow(ctx, `SELECT `+episodeLockCols+` FROM episodes WHERE id = $1`, episodeID), false)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("episode")
		}
		if err != nil {
			return err
		}
		entries, err := readEvents(ctx, tx, episodeID)
		if err != nil {
			return err
		}
		rep = ledger.Verify(episodeID, entries, &ep.LedgerHead)
		return nil
	})
	return rep, err
}
