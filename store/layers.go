package store

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

// SetupLayer is one target's setup result, kept as a checkpoint archive
// and shared by every episode of the same key (migration 0013).
type SetupLayer struct {
	Key          string          // hex SHA-256 of the layer's inputs
	Digest       string          // "sha256:<hex>" of the archive
	RootfsDigest string          // the environment it was made on
	Target       string          // the git_commit target it was made for
	Inputs       json.RawMessage // what the key hashes, for the operator
	Bytes        int64
	CreatedAt    time.Time
	UsedAt       time.Time
}

var layerKeyPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// SetupLayer returns the layer of key and marks it used now (eviction is
// least recently used first); a key with none is not_found.
func (p *Postgres) SetupLayer(ctx context.Context, key string) (SetupLayer, error) {
	if !layerKeyPattern.MatchString(key) {
		return SetupLayer{}, invalid("setup layer key")
	}
	var l SetupLayer
	err := p.query(ctx, "setup_layer", func(q querier) error {
		err := q.QueryRow(ctx, `UPDATE setup_layers SET used_at = now() WHERE key = $1
			RETURNING key, digest, rootfs_digest, target, inputs, bytes, created_at, used_at`, key).
			Scan(&l.Key, &l.Digest, &l.RootfsDigest, &l.Target, &l.Inputs, &l.Bytes, &l.CreatedAt, &l.UsedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("setup layer")
		}
		return err
	})
	return l, err
}

// RecordSetupLayer records (or replaces) the layer of l.Key, whose
// archive the caller has replicated (PutArchive) first, and evicts the
// least recently used layers beyond keep in the same transaction. It
// returns the evicted ones — a replaced layer of the same key among
// them — so their holders can let their archives go; pruning removes
// their replicas once no row names them.
func (p *Postgres) RecordSetupLayer(ctx context.Context, l SetupLayer, keep int) ([]SetupLayer, error) {
	if !layerKeyPattern.MatchString(l.Key) || !digestPattern.MatchString(l.Digest) || l.RootfsDigest == "" || l.Target == "" ||
		l.Bytes < 0 || keep < 1 || !json.Valid(l.Inputs) {
		return nil, invalid("setup layer")
	}
	var out []SetupLayer
	err := p.run(ctx, "record_setup_layer", pgx.TxOptions{}, func(tx pgx.Tx) error {
		out = nil
		var old SetupLayer
		err := tx.QueryRow(ctx, `SELECT key, digest FROM setup_layers WHERE key = $1 FOR UPDATE`, l.Key).Scan(&old.Key, &old.Digest)
		switch {
		case err == nil && old.Digest != l.Digest:
			out = append(out, old)
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO setup_layers (key, digest, rootfs_digest, target, inputs, bytes) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (key) DO UPDATE SET digest = $2, rootfs_digest = $3, target = $4, inputs = $5, bytes = $6, created_at = now(), used_at = now()`,
			l.Key, l.Digest, l.RootfsDigest, l.Target, l.Inputs, l.Bytes); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `DELETE FROM setup_layers WHERE key IN (
			SELECT key FROM setup_layers ORDER BY used_at DESC, key OFFSET $1) RETURNING key, digest`, keep)
		if err != nil {
			return err
		}
		gone, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SetupLayer, error) {
			var s SetupLayer
			return s, r.Scan(&s.Key, &s.Digest)
		})
		if err != nil {
			return err
		}
		out = append(out, gone...)
		// The other kernels learn of what went from its tombstones; the
		// layer recorded now is no longer gone, wherever it went before.
		if _, err := tx.Exec(ctx, `DELETE FROM setup_layer_tombstones WHERE (key = $1 AND digest = $2) OR evicted_at < now() - $3::interval`,
			l.Key, l.Digest, tombstoneTTL); err != nil {
			return err
		}
		for _, g := range out {
			if _, err := tx.Exec(ctx, `INSERT INTO setup_layer_tombstones (key, digest) VALUES ($1, $2)
				ON CONFLICT (key, digest) DO UPDATE SET evicted_at = clock_timestamp()`, g.Key, g.Digest); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// tombstoneTTL is how long an evicted layer's tombstone is kept: a kernel
// down longer than that keeps its holds on it until its launcher store is
// cleaned by hand.
const tombstoneTTL = "7 days"

// EvictedLayer is an evicted layer's archive: every kernel that imported
// it lets its hold on it go.
type EvictedLayer struct {
	Key, Digest string
	At          time.Time
}

// EvictedPage is how many tombstones EvictedSetupLayers returns at most.
const EvictedPage = 1000

// EvictedSetupLayers lists the tombstones of layers evicted (or replaced)
// after since, oldest first, at most EvictedPage; the zero time lists all
// that are kept.
func (p *Postgres) EvictedSetupLayers(ctx context.Context, since time.Time) ([]EvictedLayer, error) {
	var out []EvictedLayer
	err := p.read(ctx, "evicted_setup_layers", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT key, digest, evicted_at FROM setup_layer_tombstones WHERE evicted_at > $1
			ORDER BY evicted_at, key, digest LIMIT $2`, since, EvictedPage)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (EvictedLayer, error) {
			var e EvictedLayer
			return e, r.Scan(&e.Key, &e.Digest, &e.At)
		})
		return err
	})
	return out, err
}
