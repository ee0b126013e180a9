package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
)

// BenchmarkClaimTask measures a claim — the first ready task under the
// claim lock, caps and budget checked, its claim and ledger event written —
// with 1 and 3 concurrent claimers (kernels), side by side with the floor:
// the bare SKIP LOCKED claim a job queue makes (River's shape) on a table
// with the same priority index and nothing else: no ledger, no caps, no
// budget, no serialisation. Both run interleaved in the same benchmark.
// Reported: claim p50/p99 for each, and store÷floor (total claim time).
func BenchmarkClaimTask(b *testing.B) {
	if testHarness.Cluster == nil {
		privileged.Skip(b, "no PostgreSQL cluster: "+testHarness.Err.Error())
	}
	for _, claimers := range []int{1, 3} {
		b.Run(fmt.Sprintf("claimers=%d", claimers), func(b *testing.B) {
			e := newEnv(b)
			ctx := context.Background()
			kernels := []*Postgres{e.store}
			for i := 1; i < claimers; i++ {
				kernels = append(kernels, e.open(fmt.Sprintf("kernel-%d", i), 0))
			}
			admin := e.admin()
			if _, err := admin.Exec(ctx, `CREATE TABLE floor_jobs (id bigserial PRIMARY KEY, priority int NOT NULL, state text NOT NULL,
				owner text, created_at timestamptz NOT NULL DEFAULT now());
				CREATE INDEX floor_ready ON floor_jobs (priority DESC, created_at, id) WHERE state = 'queued'`); err != nil {
				b.Fatal(err)
			}
			floors := make([]*pgx.Conn, claimers)
			for i := range floors {
				c, err := pgx.Connect(ctx, e.cluster.AdminConnString(e.db))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close(ctx)
				floors[i] = c
			}
			// Enough ready work for every op of both.
			for i := 0; i < b.N; i++ {
				if _, err := e.store.SubmitTask(ctx, NewTask{Project: fmt.Sprintf("p%d", i%4), Priority: i % 5, MinClass: 3,
					Submitter: "bench", Spec: []byte(`{"intent":"bench"}`)}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := admin.Exec(ctx, `INSERT INTO floor_jobs (priority, state) SELECT g % 5, 'queued' FROM generate_series(1, $1) g`, b.N); err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var ours, floor []time.Duration
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + claimers - 1) / claimers
			for w := 0; w < claimers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var o, f []time.Duration
					for i := 0; i < per; i++ {
						t0 := time.Now()
						if _, ok, err := kernels[w].ClaimTask(ctx, Claim{MaxClass: 3, TTL: time.Minute}); err != nil || !ok {
							if err != nil {
								b.Error(err)
							}
							break
						}
						o = append(o, time.Since(t0))
						t0 = time.Now()
						tag, err := floors[w].Exec(ctx, `UPDATE floor_jobs SET state = 'running', owner = $1 WHERE id = (SELECT id FROM floor_jobs
							WHERE state = 'queued' ORDER BY priority DESC, created_at, id FOR UPDATE SKIP LOCKED LIMIT 1)`, fmt.Sprint(w))
						if err != nil || tag.RowsAffected() != 1 {
							break
						}
						f = append(f, time.Since(t0))
					}
					mu.Lock()
					ours, floor = append(ours, o...), append(floor, f...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			if len(ours) == 0 || len(floor) == 0 {
				b.Fatal("no claims")
			}
			slices.Sort(ours)
			slices.Sort(floor)
			pct := func(d []time.Duration, p int) float64 { return float64(d[min(len(d)-1, len(d)*p/100)].Microseconds()) }
			var sumO, sumF time.Duration
			for _, d := range ours {
				sumO += d
			}
			for _, d := range floor {
				sumF += d
			}
			b.ReportMetric(pct(ours, 50), "claim-p50-µs")
			b.ReportMetric(pct(ours, 99), "claim-p99-µs")
			b.ReportMetric(pct(floor, 50), "floor-p50-µs")
			b.ReportMetric(pct(floor, 99), "floor-p99-µs")
			b.ReportMetric(float64(sumO)/float64(sumF), "store÷floor")
		})
	}
}
