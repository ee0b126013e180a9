package store

import (
	"context"
	"errors"
	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"slices"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/store/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestSpendTotals: an episode's spend (bytes and effects so far, effects in
// the last minute) is what its effect_spend rows add up to, as the commit
// reads it under the lock and as Spend reports it; the totals are kept by
// the database (migration 0006), not summed per commit, and the kernel
// role can read them but never write them; a row older than the window
// leaves the per-minute count and stays in the totals; and the migration
// computes the totals of rows written before it.
func TestSpendTotals(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f, other := e.episode(s), e.episode(s)
	sizes := []int64{100, 0, 7, 4096}
	var seen []Spend
	for _, n := range sizes {
		eff := f.ready(t, s)
		if _, err := s.EnterCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1, Bytes: n},
			func(_ context.Context, v CommitView) error { seen = append(seen, v.Spent); return nil }, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Another episode's commit counts for it alone.
	eff := other.ready(t, s)
	if _, err := s.EnterCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1, Bytes: 1 << 20}, allow, nil); err != nil {
		t.Fatal(err)
	}
	var total int64
	for i, n := range sizes {
		if want := (Spend{Bytes: total, Effects: int64(i), LastMinute: int64(i)}); seen[i] != want {
			t.Fatalf("commit %d read %+v under the lock, want %+v", i, seen[i], want)
		}
		total += n
	}
	want := Spend{Bytes: total, Effects: int64(len(sizes)), LastMinute: int64(len(sizes))}
	if got, err := s.Spend(ctx, f.ep.ID); err != nil || got != want {
		t.Fatalf("Spend: %+v, %v; want %+v", got, err, want)
	}
	if got, err := s.Spend(ctx, other.ep.ID); err != nil || got != (Spend{Bytes: 1 << 20, Effects: 1, LastMinute: 1}) {
		t.Fatalf("other episode's Spend: %+v, %v", got, err)
	}

	admin := e.admin()
	totals := func() (bytes, effects int64) {
		t.Helper()
		if err := admin.QueryRow(ctx, `SELECT bytes, effects FROM episode_spend WHERE episode_id = $1`, f.ep.ID).Scan(&bytes, &effects); err != nil {
			t.Fatal(err)
		}
		return bytes, effects
	}
	if b, n := totals(); b != total || n != int64(len(sizes)) {
		t.Fatalf("episode_spend holds %d bytes, %d effects; want %d, %d", b, n, total, len(sizes))
	}

	// The kernel role reads the totals and cannot lower them.
	kernel, err := pgx.Connect(ctx, e.cluster.KernelConnString(e.db))
	if err != nil {
		t.Fatal(err)
	}
	defer kernel.Close(ctx)
	for _, sql := range []string{
		`UPDATE episode_spend SET bytes = 0`,
		`DELETE FROM episode_spend`,
		`INSERT INTO episode_spend (episode_id, bytes, effects) VALUES (gen_random_uuid(), 0, 0)`,
		`DELETE FROM effect_spend`,
		`UPDATE effect_spend SET bytes = 0`,
		`SELECT effect_spend_total()`,
	} {
		_, err := kernel.Exec(ctx, sql)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "42501" {
			t.Errorf("kernel role: %s: %v, want insufficient_privilege", sql, err)
		}
	}
	if b, _ := totals(); b != total {
		t.Fatalf("totals changed to %d bytes", b)
	}

	// A row older than the window leaves the per-minute count only.
	if _, err := admin.Exec(ctx, `UPDATE effect_spend SET at = at - interval '2 minutes'
		WHERE effect_id = (SELECT effect_id FROM effect_spend WHERE episode_id = $1 LIMIT 1)`, f.ep.ID); err != nil {
		t.Fatal(err)
	}
	want.LastMinute--
	if got, err := s.Spend(ctx, f.ep.ID); err != nil || got != want {
		t.Fatalf("Spend after a row aged: %+v, %v; want %+v", got, err, want)
	}

	// Rows written before the migration: taken back to before 0006 (the
	// newest migration when this was written; a later one must be taken
	// back too) and migrated again, the totals are the rows' sums.
	embedded, err := migrations.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `DROP TRIGGER effect_spend_total ON effect_spend; DROP FUNCTION effect_spend_total();
		DROP TABLE episode_spend; DELETE FROM schema_migrations WHERE version = 6;
		ALTER TABLE egress_fetches DROP CONSTRAINT egress_fetches_outcome_check;
		ALTER TABLE egress_fetches ADD CONSTRAINT egress_fetches_outcome_check CHECK (outcome IN ('fetched', 'cached', 'refused', 'failed'));
		DELETE FROM schema_migrations WHERE version = 7;
		DROP TABLE actions; DROP TABLE task_events; DROP TABLE tasks; DROP TABLE project_budgets;
		DROP TABLE checkpoint_archive_chunks; DROP TABLE checkpoint_archives; DROP INDEX checkpoints_digest; DROP TABLE setup_layers;
		DROP TABLE setup_layer_tombstones; ALTER TABLE effects DROP COLUMN outside_lease;
		DELETE FROM schema_migrations WHERE version IN (8, 9, 10, 11, 12, 13, 14, 15)`); err != nil {
		t.Fatal(err)
	}
	if n, err := migrations.Apply(ctx, admin, embedded); err != nil || n != 10 {
		t.Fatalf("re-applying 0006: %d, %v", n, err)
	}
	if b, n := totals(); b != total || n != int64(len(sizes)) {
		t.Fatalf("migrated totals: %d bytes, %d effects; want %d, %d", b, n, total, len(sizes))
	}
	if got, err := s.Spend(ctx, other.ep.ID); err != nil || got.Bytes != 1<<20 || got.Effects != 1 {
		t.Fatalf("other episode after migration: %+v, %v", got, err)
	}
}

// BenchmarkCommitAfterManyEffects: commit_intent on an episode that has
// already spent on 20,000 effects, side by side with one on a fresh
// episode, alternated. The spend a commit reads is the episode's totals
// and its last minute's rows (migration 0006), so the ratio stays near 1;
// summing every row, as before, it grew with the episode.
func BenchmarkCommitAfterManyEffects(b *testing.B) {
	if testHarness.Cluster == nil {
		privileged.Skip(b, "no PostgreSQL cluster: "+testHarness.Err.Error())
	}
	e := newEnv(b)
	s, ctx := e.store, ctxT(b)
	busy, fresh := e.episode(s), e.episode(s)
	seed := busy.ready(b, s)
	// 20,000 effects copied from seed, ready as seed is, each with an hour-old spend row.
	admin := e.admin()
	for _, sql := range []string{`INSERT INTO effects SELECT (jsonb_populate_record(NULL::effects,
			to_jsonb(x) || jsonb_build_object('id', gen_random_uuid()))).*
		FROM effects x, generate_series(1, 20000) WHERE x.id = $1 AND $2::uuid IS NOT NULL`,
		`INSERT INTO effect_spend (effect_id, episode_id, lease_id, bytes, at)
			SELECT id, episode_id, lease_id, 1, now() - interval '1 hour' FROM effects WHERE episode_id = $2 AND id <> $1`,
	} {
		if _, err := admin.Exec(ctx, sql, seed.ID, busy.ep.ID); err != nil {
			b.Fatal(err)
		}
	}
	commit := func(f fixture) time.Duration {
		b.StopTimer()
		eff := f.ready(b, s)
		b.StartTimer()
		start := time.Now()
		if _, err := s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1, Bytes: 1}, allow); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var many, few []time.Duration
	for b.Loop() {
		many = append(many, commit(busy))
		few = append(few, commit(fresh))
	}
	slices.Sort(many)
	slices.Sort(few)
	m, f := many[len(many)/2], few[len(few)/2]
	b.ReportMetric(float64(m.Microseconds()), "after-20000-p50-µs")
	b.ReportMetric(float64(f.Microseconds()), "fresh-p50-µs")
	b.ReportMetric(float64(m)/float64(f), "ratio-p50")
}
