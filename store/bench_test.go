package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// BenchmarkCommitHorizon measures full effect lifecycles through the store
// (propose → prepare → evaluating → ready → commit_intent → committing →
// committed: seven transactions, each with its ledger event) with 1, 8 and
// 32 concurrent clients, each driving its own episode, side by side with
// the floor: the same seven transactions per effect issued directly through
// pgx, each taking the same row locks (episode; episode+effect; episode →
// effect → lease at the horizon) and writing one row, so the same fsyncs.
//
// The two run interleaved, in alternating chunks, in the same benchmark, so
// that both see the same machine: on a shared host, running them one after
// the other compares two different loads. One op is one lifecycle of each.
// Reported: effects/s and lifecycle p50/p99 for each, and store÷floor.
func BenchmarkCommitHorizon(b *testing.B) {
	if testHarness.Cluster == nil {
		privileged.Skip(b, "no PostgreSQL cluster: "+testHarness.Err.Error())
	}
	for _, clients := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			store := storeLifecycle(b, clients)
			floor := floorLifecycle(b, clients)
			var st, fl run
			chunk := 4 * clients
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				k := min(chunk, b.N-done)
				st.add(b, drive(clients, k, store))
				fl.add(b, drive(clients, k, floor))
			}
			b.StopTimer()
			b.ReportMetric(st.rate(), "store-effects/s")
			b.ReportMetric(fl.rate(), "floor-effects/s")
			b.ReportMetric(st.rate()/fl.rate(), "store/floor")
			b.ReportMetric(st.pct(0.50), "store-p50-ms")
			b.ReportMetric(st.pct(0.99), "store-p99-ms")
			b.ReportMetric(fl.pct(0.50), "floor-p50-ms")
			b.ReportMetric(fl.pct(0.99), "floor-p99-ms")
		})
	}
}

// run accumulates the chunks of one side.
type run struct {
	elapsed time.Duration
	lat     []time.Duration
	sorted  bool
}

type chunkResult struct {
	elapsed time.Duration
	lat     []time.Duration
	err     error
}

func (r *run) add(b *testing.B, c chunkResult) {
	if c.err != nil {
		b.Fatal(c.err)
	}
	r.elapsed += c.elapsed
	r.lat = append(r.lat, c.lat...)
	r.sorted = false
}

func (r *run) rate() float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }

func (r *run) pct(p float64) float64 {
	if !r.sorted {
		slices.Sort(r.lat)
		r.sorted = true
	}
	return float64(r.lat[int(p*float64(len(r.lat)-1))].Microseconds()) / 1000
}

// drive runs n lifecycles split over clients goroutines (client c always
// uses its own episode and connection).
func drive(clients, n int, lifecycle func(ctx context.Context, client int) error) chunkResult {
	ctx := context.Background()
	lat := make([][]time.Duration, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		k := n / clients
		if c < n%clients {
			k++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < k; i++ {
				t0 := time.Now()
				if err := lifecycle(ctx, c); err != nil {
					errs[c] = err
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	return chunkResult{elapsed: time.Since(start), lat: slices.Concat(lat...), err: errors.Join(errs...)}
}

func storeLifecycle(b *testing.B, clients int) func(context.Context, int) error {
	e := newEnv(b)
	s := e.openConns("bench", time.Hour, clients)
	eps := make([]fixture, clients)
	for i := range eps {
		eps[i] = e.episode(s)
	}
	return func(ctx context.Context, c int) error {
		f := eps[c]
		eff, err := readyEffect(ctx, s, f.ep.ID, 1, f.lease.ID)
		if err != nil {
			return err
		}
		if _, err := s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1}, allow); err != nil {
			return err
		}
		if _, err := s.Transition(ctx, Transition{EffectID: eff.ID, Revision: eff.Revision, To: Committing}); err != nil {
			return err
		}
		_, err = s.FinishCommit(ctx, Outcome{EffectID: eff.ID, State: Committed, Receipt: []byte(`{"oid":"x"}`)})
		return err
	}
}

const floorSchema = `
CREATE TABLE floor_episodes (id uuid PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE floor_leases (id uuid PRIMARY KEY, episode_id uuid NOT NULL);
CREATE TABLE floor_effects (id uuid PRIMARY KEY, episode_id uuid NOT NULL, state text NOT NULL);`

func floorLifecycle(b *testing.B, clients int) func(context.Context, int) error {
	e := newEnv(b)
	ctx := context.Background()
	admin := e.admin()
	if _, err := admin.Exec(ctx, floorSchema); err != nil {
		b.Fatal(err)
	}
	type client struct {
		conn         *pgx.Conn
		ep, lease    uuid.UUID
		lockEp, lock string
	}
	cs := make([]client, clients)
	for i := range cs {
		conn, err := pgx.Connect(ctx, e.cluster.AdminConnString(e.db))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close(ctx) })
		cs[i] = client{conn: conn, ep: uuid.New(), lease: uuid.New()}
		if _, err := conn.Exec(ctx, `INSERT INTO floor_episodes VALUES ($1, 0)`, cs[i].ep); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO floor_leases VALUES ($1, $2)`, cs[i].lease, cs[i].ep); err != nil {
			b.Fatal(err)
		}
	}
	// One minimal transaction: lock the listed rows FOR UPDATE in order,
	// write one row.
	txn := func(ctx context.Context, c client, effect uuid.UUID, lockEffect, lockLease bool, write string, args ...any) error {
		tx, err := c.conn.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SELECT 1 FROM floor_episodes WHERE id = $1 FOR UPDATE`, c.ep); err != nil {
			return err
		}
		if lockEffect {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM floor_effects WHERE id = $1 FOR UPDATE`, effect); err != nil {
				return err
			}
		}
		if lockLease {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM floor_leases WHERE id = $1 FOR UPDATE`, c.lease); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, write, args...); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	return func(ctx context.Context, i int) error {
		c := cs[i]
		id := uuid.New()
		if err := txn(ctx, c, id, false, true, `INSERT INTO floor_effects VALUES ($1, $2, 'proposed')`, id, c.ep); err != nil {
			return err
		}
		for _, st := range []string{"prepared", "evaluating", "ready"} {
			if err := txn(ctx, c, id, true, false, `UPDATE floor_effects SET state = $2 WHERE id = $1`, id, st); err != nil {
				return err
			}
		}
		if err := txn(ctx, c, id, true, true, `UPDATE floor_effects SET state = 'commit_intent' WHERE id = $1`, id); err != nil {
			return err
		}
		for _, st := range []string{"committing", "committed"} {
			if err := txn(ctx, c, id, true, false, `UPDATE floor_effects SET state = $2 WHERE id = $1`, id, st); err != nil {
				return err
			}
		}
		return nil
	}
}
