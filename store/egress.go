package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EgressFetch is one request through an episode's egress proxy (kernel/
// egress), admitted or refused. It holds no content: a plain-HTTP body is
// named by its SHA-256, a tunnel by its byte counts.
type EgressFetch struct {
	EpisodeID uuid.UUID
	Kind      string // "http" or "tunnel"
	Method    string
	Host      string
	Path      string // "" for a tunnel
	Outcome   string // fetched | cached | refused | failed
	Code      string // the catalogue code of a refusal or failure, else ""
	Reason    string // why it was refused or failed, else ""
	Status    int    // the HTTP status the domain saw
	Bytes     int64  // bytes delivered into the domain
	BytesUp   int64  // bytes the domain sent out (tunnels)
	SHA256    string // hex digest of a complete plain-HTTP body, else ""
	Duration  time.Duration
	At        time.Time
}

// Egress fetch kinds and outcomes.
const (
	EgressHTTP    = "http"
	EgressTunnel  = "tunnel"
	EgressFetched = "fetched"
	EgressCached  = "cached"
	EgressRefused = "refused"
	EgressFailed  = "failed"
	// EgressOpened is a tunnel's first row, written before the domain is
	// told the tunnel is open; its closing row follows with the counts.
	EgressOpened = "opened"
)

// ErrEgressCap is ReserveEgress's refusal: the reservation does not fit
// under the episode's cap. Nothing was reserved.
var ErrEgressCap = errors.New("store: the episode's egress byte cap is reached")

// RecordEgress appends fetches to the egress ledger, in one transaction
// (one commit however many: the proxy writes its rows in batches).
func (p *Postgres) RecordEgress(ctx context.Context, fs ...EgressFetch) error {
	if len(fs) == 0 {
		return nil
	}
	if len(fs) > maxEgressBatch {
		return invalid("more than %d egress fetches in one batch", maxEgressBatch)
	}
	var q strings.Builder
	q.WriteString(`INSERT INTO egress_fetches
			(episode_id, kind, method, host, path, outcome, code, reason, status, bytes, bytes_up, sha256, duration_ms) VALUES `)
	args := make([]any, 0, 13*len(fs))
	for i, f := range fs {
		if f.Bytes < 0 || f.BytesUp < 0 || f.Duration < 0 || f.Status < 0 || f.Status > 999 {
			return invalid("egress fetch counters must not be negative")
		}
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(")
		for j := range 13 {
			if j > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "$%d", len(args)+j+1)
		}
		q.WriteString(")")
		args = append(args, f.EpisodeID, f.Kind, clipText(f.Method, 16), clipText(f.Host, 255), clipText(f.Path, 4096), f.Outcome,
			clipText(f.Code, 64), clipText(f.Reason, 512), f.Status, f.Bytes, f.BytesUp, f.SHA256, f.Duration.Milliseconds())
	}
	return p.query(ctx, "record_egress", func(tx querier) error {
		rows, err := tx.Query(ctx, q.String(), args...)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	})
}

// maxEgressBatch bounds the rows of one RecordEgress (13 parameters each,
// far under PostgreSQL's 65535).
const maxEgressBatch = 256

// clipText bounds a recorded string: the ledger keeps what was asked, cut,
// rather than refusing to record a refusal (egress fetches, relay
// refusals).
func clipText(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	// PostgreSQL text refuses NUL and invalid UTF-8 (a refused request's
	// path may hold either; a cut may split a rune).
	return strings.ReplaceAll(strings.ToValidUTF8(s, ""), "\x00", "")
}

// EgressFetches lists an episode's egress ledger, oldest first.
func (p *Postgres) EgressFetches(ctx context.Context, episodeID uuid.UUID) ([]EgressFetch, error) {
	var out []EgressFetch
	err := p.query(ctx, "egress_fetches", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT episode_id, kind, method, host, path, outcome, code, reason, status,
			bytes, bytes_up, sha256, duration_ms, at FROM egress_fetches WHERE episode_id = $1 ORDER BY id`, episodeID)
		if err != nil {
			return err
		}
		var f EgressFetch
		var ms int64
		_, err = pgx.ForEachRow(rows, []any{&f.EpisodeID, &f.Kind, &f.Method, &f.Host, &f.Path, &f.Outcome, &f.Code,
			&f.Reason, &f.Status, &f.Bytes, &f.BytesUp, &f.SHA256, &ms, &f.At}, func() error {
			f.Duration = time.Duration(ms) * time.Millisecond
			out = append(out, f)
			return nil
		})
		return err
	})
	return out, err
}

// ReserveEgress adds n bytes to the episode's egress counter if the sum
// stays within limit, and returns the new total. One statement: the
// conditional upsert holds the counter's row lock, so concurrent
// reservations are serialised and cannot both take the last byte. Over
// the cap it returns ErrEgressCap (with limit_exceeded) and reserves
// nothing.
func (p *Postgres) ReserveEgress(ctx context.Context, episodeID uuid.UUID, n, limit int64) (int64, error) {
	if n < 0 || limit < 0 {
		return 0, invalid("egress reservation must not be negative")
	}
	if n > limit {
		return 0, capReached()
	}
	var used int64
	err := p.query(ctx, "reserve_egress", func(tx querier) error {
		err := tx.QueryRow(ctx, `INSERT INTO egress_quota AS q (episode_id, used) VALUES ($1, $2)
			ON CONFLICT (episode_id) DO UPDATE SET used = q.used + EXCLUDED.used
			WHERE q.used + EXCLUDED.used <= $3
			RETURNING used`, episodeID, n, limit).Scan(&used)
		if errors.Is(err, pgx.ErrNoRows) {
			// The WHERE refused the update: over the cap. A refusal of
			// ours, so the connection goes back to the pool.
			return capReached()
		}
		return err
	})
	return used, err
}

func capReached() error {
	return &wrappedCap{protocol.Errorf(protocol.CodeLimitExceeded, "egress byte cap reached")}
}

// wrappedCap is limit_exceeded on the wire and ErrEgressCap to errors.Is.
type wrappedCap struct{ error }

func (w *wrappedCap) Unwrap() []error { return []error{w.error, ErrEgressCap} }

// ReleaseEgress returns n reserved bytes that were not delivered (a fetch
// reserves ahead of what it streams).
func (p *Postgres) ReleaseEgress(ctx context.Context, episodeID uuid.UUID, n int64) error {
	if n < 0 {
		return invalid("egress release must not be negative")
	}
	if n == 0 {
		return nil
	}
	return p.query(ctx, "release_egress", func(tx querier) error {
		rows, err := tx.Query(ctx, `UPDATE egress_quota SET used = greatest(used - $2, 0) WHERE episode_id = $1`, episodeID, n)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	})
}

// EgressUsed is the episode's reserved egress bytes now.
func (p *Postgres) EgressUsed(ctx context.Context, episodeID uuid.UUID) (int64, error) {
	var used int64
	err := p.query(ctx, "egress_used", func(tx querier) error {
		err := tx.QueryRow(ctx, `SELECT COALESCE((SELECT used FROM egress_quota WHERE episode_id = $1), 0)`, episodeID).Scan(&used)
		return err
	})
	return used, err
}
