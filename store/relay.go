package store

import (
	"context"
	"errors"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The inference relay's durable budget and call ledger (kernel/relay,
// migration 0004). Every change goes through mutate: under the episode's
// row lock, by the instance that owns the episode, with its ledger event in
// the same transaction. The relay charges before it forwards (ChargeRelay),
// gives back what it did not use when it closes (ReleaseRelay) and records
// each finished call (RecordRelayCall).

// RelayBudget is an episode's inference budget: its limits and its charge.
type RelayBudget struct {
	EpisodeID uuid.UUID
	MaxTokens int64
	MaxSpend  int64 // micro-USD
	Tokens    int64
	Spend     int64
	Exhausted bool // the charge reached a limit, or a call did not fit
}

// RelayAmount is a charge against an episode's budget.
type RelayAmount struct {
	Tokens int64
	Spend  int64 // micro-USD
}

// RelayRecord is one finished call, for the ledger.
type RelayRecord struct {
	EpisodeID      uuid.UUID
	Provider       string
	Route          string
	Model          string
	RequestDigest  string
	Reserved       RelayAmount // what admission set aside for it
	Charged        RelayAmount // its usage, or Reserved when it reported none
	Status         int
	UsageReported  bool
	InputTokens    int64
	OutputTokens   int64
	ResponseDigest string
	FirstByte      time.Duration
	Duration       time.Duration
}

// RelayRefusal is one call the relay refused at admission: nothing was
// forwarded or charged. It holds no content; the method, raw path and model
// are what the worker asked for, clipped.
type RelayRefusal struct {
	EpisodeID uuid.UUID
	Provider  string
	Method    string
	Route     string // the raw request path, without the query
	Model     string // "" when admission refused before reading one
	Code      protocol.Code
	Status    int
	// Last marks the last refusal the relay records; later ones are only
	// logged (see kernel/relay).
	Last bool
}

// RelayCall is one row of the relay ledger.
type RelayCall struct {
	ID uuid.UUID
	RelayRecord
	At time.Time
}

const relayBudgetCols = `episode_id, max_tokens, max_spend, tokens, spend, exhausted_at IS NOT NULL`

func scanRelayBudget(row pgx.Row) (RelayBudget, error) {
	var b RelayBudget
	err := row.Scan(&b.EpisodeID, &b.MaxTokens, &b.MaxSpend, &b.Tokens, &b.Spend, &b.Exhausted)
	return b, err
}

// SetRelayBudget creates an episode's budget or changes its limits (a new
// policy version); the charge is kept, so neither a restart nor a new
// policy resets what was spent.
func (p *Postgres) SetRelayBudget(ctx context.Context, episodeID uuid.UUID, maxTokens, maxSpend int64) (RelayBudget, error) {
	if maxTokens < 0 || maxSpend < 0 {
		return RelayBudget{}, invalid("relay budget limits must not be negative")
	}
	var out RelayBudget
	err := p.mutate(ctx, "set_relay_budget", onEpisode(episodeID), func(m *mtx) error {
		b, err := scanRelayBudget(m.tx.QueryRow(m.ctx, `SELECT `+relayBudgetCols+` FROM relay_budgets WHERE episode_id = $1`, episodeID))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			b = RelayBudget{EpisodeID: episodeID}
			m.write(`INSERT INTO relay_budgets (episode_id, max_tokens, max_spend) VALUES ($1, $2, $3)`, episodeID, maxTokens, maxSpend)
		case err != nil:
			return err
		case b.MaxTokens == maxTokens && b.MaxSpend == maxSpend:
			out = b
			return nil // unchanged: nothing to write
		default:
			m.write(`UPDATE relay_budgets SET max_tokens = $2, max_spend = $3 WHERE episode_id = $1`, episodeID, maxTokens, maxSpend)
		}
		b.MaxTokens, b.MaxSpend = maxTokens, maxSpend
		m.emit("inference_budget_set", map[string]any{"max_tokens": maxTokens, "max_spend_micro_usd": maxSpend})
		out = b
		return nil
	})
	return out, err
}

// ChargeRelay charges an episode's budget before anything is forwarded:
// want, clipped to what is left, and at least min; when even min does not
// fit it refuses with budget_exhausted and records the exhaustion once.
// With force (a call that used more than it reserved) it charges want
// whatever the limit: that usage happened. The episode must be active
// unless force.
func (p *Postgres) ChargeRelay(ctx context.Context, episodeID uuid.UUID, min, want RelayAmount, force bool) (RelayAmount, RelayBudget, error) {
	if min.Tokens < 0 || min.Spend < 0 || want.Tokens < min.Tokens || want.Spend < min.Spend {
		return RelayAmount{}, RelayBudget{}, invalid("a relay charge must satisfy 0 <= min <= want")
	}
	var got RelayAmount
	var out RelayBudget
	exhausted := false
	err := p.mutate(ctx, "charge_relay", onEpisode(episodeID), func(m *mtx) error {
		if !force {
			if err := m.requireActive(); err != nil {
				return err
			}
		}
		b, err := scanRelayBudget(m.tx.QueryRow(m.ctx, `SELECT `+relayBudgetCols+` FROM relay_budgets WHERE episode_id = $1`, episodeID))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("relay budget")
		}
		if err != nil {
			return err
		}
		got = want
		if !force {
			got.Tokens = max(min.Tokens, minInt(want.Tokens, b.MaxTokens-b.Tokens))
			got.Spend = max(min.Spend, minInt(want.Spend, b.MaxSpend-b.Spend))
		}
		// The limit check is the UPDATE's own WHERE clause.
		err = m.tx.QueryRow(m.ctx, `UPDATE relay_budgets SET tokens = tokens + $2, spend = spend + $3
			WHERE episode_id = $1 AND ($4 OR (tokens + $2 <= max_tokens AND spend + $3 <= max_spend))
			RETURNING `+relayBudgetCols, episodeID, got.Tokens, got.Spend, force).Scan(
			&out.EpisodeID, &out.MaxTokens, &out.MaxSpend, &out.Tokens, &out.Spend, &out.Exhausted)
		if errors.Is(err, pgx.ErrNoRows) {
			exhausted, out = true, b
			return markExhausted(m, episodeID)
		}
		if err != nil {
			return err
		}
		m.emit("inference_budget_charged", map[string]any{"tokens": got.Tokens, "spend_micro_usd": got.Spend, "over_limit": force,
			"charged_tokens": out.Tokens, "charged_spend_micro_usd": out.Spend})
		if !out.Exhausted && (out.Tokens >= out.MaxTokens || out.MaxSpend > 0 && out.Spend >= out.MaxSpend) {
			out.Exhausted = true
			return markExhausted(m, episodeID)
		}
		return nil
	})
	if err != nil {
		return RelayAmount{}, RelayBudget{}, err
	}
	if exhausted {
		return RelayAmount{}, out, protocol.Errorf(protocol.CodeBudgetExhausted, "a charge of %d tokens does not fit", min.Tokens)
	}
	return got, out, nil
}

func minInt(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

// ReleaseRelay gives back what a relay charged and did not use (its
// unused block when it closes). Never below zero.
func (p *Postgres) ReleaseRelay(ctx context.Context, episodeID uuid.UUID, a RelayAmount) (RelayBudget, error) {
	if a.Tokens < 0 || a.Spend < 0 {
		return RelayBudget{}, invalid("a release must not be negative")
	}
	var out RelayBudget
	err := p.mutate(ctx, "release_relay", onEpisode(episodeID), func(m *mtx) error {
		var err error
		out, err = scanRelayBudget(m.tx.QueryRow(m.ctx, `UPDATE relay_budgets SET tokens = GREATEST(tokens - $2, 0), spend = GREATEST(spend - $3, 0)
			WHERE episode_id = $1 RETURNING `+relayBudgetCols, episodeID, a.Tokens, a.Spend))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("relay budget")
		}
		if err != nil {
			return err
		}
		m.emit("inference_budget_released", map[string]any{"tokens": a.Tokens, "spend_micro_usd": a.Spend})
		return nil
	})
	return out, err
}

// RecordRelayCall writes a finished call to the relay ledger and the
// episode's hash-chained ledger. It changes no charge: the budget was
// charged before the call was forwarded.
func (p *Postgres) RecordRelayCall(ctx context.Context, r RelayRecord) (uuid.UUID, error) {
	for _, f := range []string{r.Provider, r.Route, r.Model, r.RequestDigest, r.ResponseDigest} {
		if len(f) > maxTextField {
			return uuid.Nil, invalid("relay record text field too long")
		}
	}
	if r.Reserved.Tokens < 0 || r.Reserved.Spend < 0 || r.Charged.Tokens < 0 || r.Charged.Spend < 0 || r.InputTokens < 0 || r.OutputTokens < 0 {
		return uuid.Nil, invalid("relay record counts must not be negative")
	}
	id := newID()
	err := p.mutate(ctx, "record_relay_call", onEpisode(r.EpisodeID), func(m *mtx) error {
		m.write(`INSERT INTO relay_calls (id, episode_id, provider, route, model, request_digest, reserved_tokens, reserved_spend,
			started_at, settled_at, status, usage_reported, input_tokens, output_tokens, tokens, spend, response_digest, first_byte_ms, duration_ms)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`,
			id, r.EpisodeID, r.Provider, r.Route, r.Model, r.RequestDigest, r.Reserved.Tokens, r.Reserved.Spend, m.now,
			r.Status, r.UsageReported, r.InputTokens, r.OutputTokens, r.Charged.Tokens, r.Charged.Spend, r.ResponseDigest,
			r.FirstByte.Milliseconds(), r.Duration.Milliseconds())
		m.emit("inference_call", map[string]any{
			"call_id": id.String(), "provider": r.Provider, "route": r.Route, "model": r.Model, "status": r.Status,
			"request_digest": r.RequestDigest, "response_digest": r.ResponseDigest, "usage_reported": r.UsageReported,
			"input_tokens": r.InputTokens, "output_tokens": r.OutputTokens, "reserved_tokens": r.Reserved.Tokens,
			"charged_tokens": r.Charged.Tokens, "charged_spend_micro_usd": r.Charged.Spend, "duration_ms": r.Duration.Milliseconds(),
		})
		return nil
	})
	return id, err
}

// RecordRelayRefusal writes a refused call to the episode's hash-chained
// ledger as an inference_refused event. It changes no charge.
func (p *Postgres) RecordRelayRefusal(ctx context.Context, r RelayRefusal) error {
	if !protocol.Known(r.Code) || r.Status < 100 || r.Status > 599 {
		return invalid("relay refusal needs a catalogue code and an HTTP status")
	}
	body := map[string]any{
		"provider": clipText(r.Provider, 128), "method": clipText(r.Method, 16), "route": clipText(r.Route, 256),
		"model": clipText(r.Model, 128), "code": string(r.Code), "status": r.Status,
	}
	if r.Last {
		body["last_recorded"] = true
	}
	return p.mutate(ctx, "record_relay_refusal", onEpisode(r.EpisodeID), func(m *mtx) error {
		m.emit("inference_refused", body)
		return nil
	})
}

// GetRelayBudget reads an episode's inference budget.
func (p *Postgres) GetRelayBudget(ctx context.Context, episodeID uuid.UUID) (RelayBudget, error) {
	var b RelayBudget
	err := p.query(ctx, "relay_budget", func(tx querier) error {
		var err error
		b, err = scanRelayBudget(tx.QueryRow(ctx, `SELECT `+relayBudgetCols+` FROM relay_budgets WHERE episode_id = $1`, episodeID))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("relay budget")
		}
		return err
	})
	return b, err
}

// RelayCalls reads an episode's relay ledger in order.
func (p *Postgres) RelayCalls(ctx context.Context, episodeID uuid.UUID) ([]RelayCall, error) {
	var out []RelayCall
	err := p.query(ctx, "relay_calls", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT id, episode_id, provider, route, model, request_digest, reserved_tokens, reserved_spend,
			started_at, COALESCE(status, 0), COALESCE(usage_reported, false), COALESCE(input_tokens, 0), COALESCE(output_tokens, 0),
			COALESCE(tokens, 0), COALESCE(spend, 0), COALESCE(response_digest, ''), COALESCE(first_byte_ms, 0), COALESCE(duration_ms, 0)
			FROM relay_calls WHERE episode_id = $1 ORDER BY started_at, id`, episodeID)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (RelayCall, error) {
			var c RelayCall
			var fb, dur int64
			r := &c.RelayRecord
			err := row.Scan(&c.ID, &r.EpisodeID, &r.Provider, &r.Route, &r.Model, &r.RequestDigest, &r.Reserved.Tokens, &r.Reserved.Spend,
				&c.At, &r.Status, &r.UsageReported, &r.InputTokens, &r.OutputTokens, &r.Charged.Tokens, &r.Charged.Spend,
				&r.ResponseDigest, &fb, &dur)
			r.FirstByte, r.Duration = time.Duration(fb)*time.Millisecond, time.Duration(dur)*time.Millisecond
			c.At = c.At.UTC()
			return c, err
		})
		return err
	})
	return out, err
}

// markExhausted records the first time an episode's budget ran out; later
// refusals write nothing, so a worker hammering an empty budget cannot
// grow the ledger.
func markExhausted(m *mtx, episodeID uuid.UUID) error {
	b, err := scanRelayBudget(m.tx.QueryRow(m.ctx, `SELECT `+relayBudgetCols+` FROM relay_budgets WHERE episode_id = $1`, episodeID))
	if err != nil || b.Exhausted {
		return err
	}
	m.write(`UPDATE relay_budgets SET exhausted_at = $2 WHERE episode_id = $1`, episodeID, m.now)
	m.emit("inference_budget_exhausted", map[string]any{
		"tokens": b.Tokens, "spend_micro_usd": b.Spend, "max_tokens": b.MaxTokens, "max_spend_micro_usd": b.MaxSpend,
	})
	return nil
}
