package store

import "context"

// Counts are the store's aggregates the metrics endpoint reads at each
// scrape: bounded by the schema's enumerations (states, kinds, the
// configured providers and models), never ids.
type Counts struct {
	Episodes map[string]int64 // by state
	Effects  []EffectCount
	Relay    []RelayTotal
	// Repairs are the epochs advanced (one per repair).
	Repairs int64
}

// EffectCount is how many effects of one kind are in one state.
type EffectCount struct {
	Kind, State string
	N           int64
}

// RelayTotal is what one provider's model has been charged.
type RelayTotal struct {
	Provider, Model string
	Calls           int64
	Tokens          int64
	SpendMicroUSD   int64
}

// Counts reads the aggregates in one read-only transaction.
func (p *Postgres) Counts(ctx context.Context) (Counts, error) {
	c := Counts{Episodes: map[string]int64{}}
	err := p.query(ctx, "counts", func(tx querier) error {
		c.Episodes, c.Effects, c.Relay = map[string]int64{}, nil, nil
		rows, err := tx.Query(ctx, `SELECT state, count(*) FROM episodes GROUP BY state`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var s string
			var n int64
			if err := rows.Scan(&s, &n); err != nil {
				rows.Close()
				return err
			}
			c.Episodes[s] = n
		}
		rows.Close()
		if rows, err = tx.Query(ctx, `SELECT kind, state, count(*) FROM effects GROUP BY kind, state`); err != nil {
			return err
		}
		for rows.Next() {
			var e EffectCount
			if err := rows.Scan(&e.Kind, &e.State, &e.N); err != nil {
				rows.Close()
				return err
			}
			c.Effects = append(c.Effects, e)
		}
		rows.Close()
		if rows, err = tx.Query(ctx, `SELECT provider, model, count(*), COALESCE(sum(tokens), 0), COALESCE(sum(spend), 0)
			FROM relay_calls GROUP BY provider, model`); err != nil {
			return err
		}
		for rows.Next() {
			var r RelayTotal
			if err := rows.Scan(&r.Provider, &r.Model, &r.Calls, &r.Tokens, &r.SpendMicroUSD); err != nil {
				rows.Close()
				return err
			}
			c.Relay = append(c.Relay, r)
		}
		rows.Close()
		return tx.QueryRow(ctx, `SELECT count(*) FROM events WHERE kind = 'epoch_advanced'`).Scan(&c.Repairs)
	})
	return c, err
}
