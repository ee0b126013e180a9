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
// migration 0003). Every change goes through mutate: under the episode's
// row lock, by the instance that owns the episode, with its ledger event in
// the same transaction.

// RelayBudget is an episode's inference budget: its limits and its charge
// (reservations not yet settled plus settled usage).
type RelayBudget struct {
	EpisodeID uuid.UUID
	MaxTokens int64
	MaxSpend  int64 // micro-USD
	Tokens    int64
	Spend     int64
	Exhausted bool // the charge reached a limit, or a call did not fit
}

// RelayReservation is one call's pessimistic charge, taken before anything
// is forwarded.
type RelayReservation struct {
	CallID        uuid.UUID // set by ReserveRelay
	EpisodeID     uuid.UUID
	Provider      string
	Route         string
	Model         string
	RequestDigest string
	Tokens        int64
	Spend         int64
}

// RelaySettlement is what the provider reported for a reserved call.
type RelaySettlement struct {
	CallID         uuid.UUID
	EpisodeID      uuid.UUID
	Status         int
	UsageReported  bool
	InputTokens    int64
	OutputTokens   int64
	Spend          int64 // priced by the relay from the reported usage
	ResponseDigest string
	FirstByte      time.Duration
	Duration       time.Duration
}

// RelayCall is one row of the relay ledger.
type RelayCall struct {
	Reservation RelayReservation
	StartedAt   time.Time
	Settled     bool
	Settlement  RelaySettlement // zero until Settled
	// What the call is charged: its usage, or its reservation while
	// unsettled or when it reported none.
	ChargedTokens int64
	ChargedSpend  int64
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

// ReserveRelay charges r's tokens and spend if both fit the episode's
// limits, and records the call; otherwise it refuses with
// ErrBudgetExhausted and records the exhaustion once (an event the first
// time). The episode must be active.
func (p *Postgres) ReserveRelay(ctx context.Context, r RelayReservation) (RelayReservation, error) {
	if r.Tokens < 0 || r.Spend < 0 {
		return RelayReservation{}, invalid("a reservation must not be negative")
	}
	if len(r.Provider) > maxTextField || len(r.Route) > maxTextField || len(r.Model) > maxTextField || len(r.RequestDigest) > maxTextField {
		return RelayReservation{}, invalid("reservation text field too long")
	}
	r.CallID = newID()
	exhausted := false
	err := p.mutate(ctx, "reserve_relay", onEpisode(r.EpisodeID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		// The limit check is the UPDATE's own WHERE clause: the charge
		// cannot pass a limit whatever runs beside it.
		var tokens, spend int64
		err := m.tx.QueryRow(m.ctx, `UPDATE relay_budgets SET tokens = tokens + $2, spend = spend + $3
			WHERE episode_id = $1 AND tokens + $2 <= max_tokens AND spend + $3 <= max_spend
			RETURNING tokens, spend`, r.EpisodeID, r.Tokens, r.Spend).Scan(&tokens, &spend)
		if errors.Is(err, pgx.ErrNoRows) {
			exhausted = true
			return markExhausted(m, r.EpisodeID)
		}
		if err != nil {
			return err
		}
		m.write(`INSERT INTO relay_calls (id, episode_id, provider, route, model, request_digest, reserved_tokens, reserved_spend, started_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			r.CallID, r.EpisodeID, r.Provider, r.Route, r.Model, r.RequestDigest, r.Tokens, r.Spend, m.now)
		m.emit("inference_reserved", map[string]any{
			"call_id": r.CallID.String(), "provider": r.Provider, "route": r.Route, "model": r.Model,
			"request_digest": r.RequestDigest, "reserved_tokens": r.Tokens, "reserved_spend_micro_usd": r.Spend,
		})
		return nil
	})
	if err != nil {
		return RelayReservation{}, err
	}
	if exhausted {
		return RelayReservation{}, protocol.Errorf(protocol.CodeBudgetExhausted, "reservation of %d tokens does not fit", r.Tokens)
	}
	return r, nil
}

// markExhausted records the first time an episode's budget ran out; later
// refusals write nothing, so a worker hammering an empty budget cannot
// grow the ledger.
func markExhausted(m *mtx, episodeID uuid.UUID) error {
	b, err := scanRelayBudget(m.tx.QueryRow(m.ctx, `SELECT `+relayBudgetCols+` FROM relay_budgets WHERE episode_id = $1`, episodeID))
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("relay budget")
	}
	if err != nil || b.Exhausted {
		return err
	}
	m.write(`UPDATE relay_budgets SET exhausted_at = $2 WHERE episode_id = $1`, episodeID, m.now)
	m.emit("inference_budget_exhausted", map[string]any{
		"tokens": b.Tokens, "spend_micro_usd": b.Spend, "max_tokens": b.MaxTokens, "max_spend_micro_usd": b.MaxSpend,
	})
	return nil
}

// SettleRelay replaces a call's reservation by its reported usage; a call
// without usage stays charged its whole reservation. A call settles once.
// It returns the budget after settling (Exhausted when the charge reached
// a limit).
func (p *Postgres) SettleRelay(ctx context.Context, s RelaySettlement) (RelayBudget, error) {
	if s.InputTokens < 0 || s.OutputTokens < 0 || s.Spend < 0 || len(s.ResponseDigest) > maxTextField {
		return RelayBudget{}, invalid("settlement usage must not be negative")
	}
	var out RelayBudget
	err := p.mutate(ctx, "settle_relay", onEpisode(s.EpisodeID), func(m *mtx) error {
		var resTokens, resSpend int64
		err := m.tx.QueryRow(m.ctx, `SELECT reserved_tokens, reserved_spend FROM relay_calls
			WHERE id = $1 AND episode_id = $2 AND settled_at IS NULL FOR UPDATE`, s.CallID, s.EpisodeID).Scan(&resTokens, &resSpend)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("unsettled relay call")
		}
		if err != nil {
			return err
		}
		tokens, spend := resTokens, resSpend
		if s.UsageReported {
			tokens, spend = s.InputTokens+s.OutputTokens, s.Spend
		}
		b, err := scanRelayBudget(m.tx.QueryRow(m.ctx, `UPDATE relay_budgets SET tokens = tokens + $2, spend = spend + $3
			WHERE episode_id = $1 RETURNING `+relayBudgetCols, s.EpisodeID, tokens-resTokens, spend-resSpend))
		if err != nil {
			return err
		}
		m.write(`UPDATE relay_calls SET settled_at = $2, status = $3, usage_reported = $4, input_tokens = $5, output_tokens = $6,
			tokens = $7, spend = $8, response_digest = $9, first_byte_ms = $10, duration_ms = $11 WHERE id = $1`,
			s.CallID, m.now, s.Status, s.UsageReported, s.InputTokens, s.OutputTokens, tokens, spend, s.ResponseDigest,
			s.FirstByte.Milliseconds(), s.Duration.Milliseconds())
		m.emit("inference_settled", map[string]any{
			"call_id": s.CallID.String(), "status": s.Status, "usage_reported": s.UsageReported,
			"input_tokens": s.InputTokens, "output_tokens": s.OutputTokens, "tokens": tokens, "spend_micro_usd": spend,
			"response_digest": s.ResponseDigest, "duration_ms": s.Duration.Milliseconds(),
		})
		if !b.Exhausted && (b.Tokens >= b.MaxTokens || b.Spend >= b.MaxSpend && b.MaxSpend > 0) {
			if err := markExhausted(m, s.EpisodeID); err != nil {
				return err
			}
			b.Exhausted = true
		}
		out = b
		return nil
	})
	return out, err
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

// RelayCalls reads an episode's relay ledger in start order.
func (p *Postgres) RelayCalls(ctx context.Context, episodeID uuid.UUID) ([]RelayCall, error) {
	var out []RelayCall
	err := p.query(ctx, "relay_calls", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT id, episode_id, provider, route, model, request_digest, reserved_tokens, reserved_spend,
			started_at, settled_at IS NOT NULL, COALESCE(status, 0), COALESCE(usage_reported, false),
			COALESCE(input_tokens, 0), COALESCE(output_tokens, 0), COALESCE(tokens, 0), COALESCE(spend, 0),
			COALESCE(response_digest, ''), COALESCE(first_byte_ms, 0), COALESCE(duration_ms, 0)
			FROM relay_calls WHERE episode_id = $1 ORDER BY started_at, id`, episodeID)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (RelayCall, error) {
			var c RelayCall
			var fb, dur int64
			rs, st := &c.Reservation, &c.Settlement
			err := r.Scan(&rs.CallID, &rs.EpisodeID, &rs.Provider, &rs.Route, &rs.Model, &rs.RequestDigest,
				&rs.Tokens, &rs.Spend, &c.StartedAt, &c.Settled, &st.Status, &st.UsageReported,
				&st.InputTokens, &st.OutputTokens, &c.ChargedTokens, &c.ChargedSpend, &st.ResponseDigest, &fb, &dur)
			if !c.Settled {
				c.ChargedTokens, c.ChargedSpend = rs.Tokens, rs.Spend
			} else {
				st.CallID, st.EpisodeID, st.Spend = rs.CallID, rs.EpisodeID, c.ChargedSpend
			}
			st.FirstByte, st.Duration = time.Duration(fb)*time.Millisecond, time.Duration(dur)*time.Millisecond
			c.StartedAt = c.StartedAt.UTC()
			return c, err
		})
		return err
	})
	return out, err
}
