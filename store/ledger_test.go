package store

import (
	"errors"
	"testing"

	"github.com/autonomic-kernel/autonomic/store/pgcluster"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ledgerEpisode makes an episode with a dozen ledger entries.
func ledgerEpisode(t *testing.T, e *env) uuid.UUID {
	t.Helper()
	f := e.episode(e.store)
	ctx := ctxT(t)
	for i := 0; i < 2; i++ {
		if _, err := readyEffect(ctx, e.store, f.ep.ID, 1, f.lease.ID); err != nil {
			t.Fatal(err)
		}
	}
	mustVerify(t, e.store, f.ep.ID)
	if ep, _ := e.store.Episode(ctx, f.ep.ID); ep.LedgerHead.Seq != 10 {
		t.Fatalf("fixture has %d entries, cases assume 10", ep.LedgerHead.Seq)
	}
	return f.ep.ID
}

// Tampering by a superuser, who can switch the append-only trigger off, is
// detected at the right link.
func TestLedgerTamperingDetected(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		sql  string
		want int64
	}{
		{"edit body", `UPDATE events SET body = replace(body, '"revision":1', '"revision":2') WHERE episode_id = $1 AND seq = 5`, 5},
		{"edit epoch", `UPDATE events SET epoch = 9 WHERE episode_id = $1 AND seq = 3`, 3},
		{"delete middle", `DELETE FROM events WHERE episode_id = $1 AND seq = 4`, 4},
		{"delete tail", `DELETE FROM events WHERE episode_id = $1 AND seq = (SELECT max(seq) FROM events WHERE episode_id = $1)`, 10},
		{"reorder", `UPDATE events SET seq = CASE seq WHEN 6 THEN 7 ELSE 6 END WHERE episode_id = $1 AND seq IN (6, 7)`, 6},
	}
	admin := e.admin()
	ctx := ctxT(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ep := ledgerEpisode(t, e)
			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// A superuser can disable the trigger for its session; the
			// chain is the barrier that remains.
			if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
				t.Fatal(err)
			}
			if tc.name == "reorder" {
				// Swap through a free slot: the primary key forbids a
				// momentary duplicate.
				for _, q := range []string{
					`UPDATE events SET seq = 1000 WHERE episode_id = $1 AND seq = 6`,
					`UPDATE events SET seq = 6 WHERE episode_id = $1 AND seq = 7`,
					`UPDATE events SET seq = 7 WHERE episode_id = $1 AND seq = 1000`,
				} {
					if _, err := tx.Exec(ctx, q, ep); err != nil {
						t.Fatal(err)
					}
				}
			} else if ct, err := tx.Exec(ctx, tc.sql, ep); err != nil || ct.RowsAffected() == 0 {
				t.Fatalf("tamper: %v (%d rows)", err, ct.RowsAffected())
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			rep, err := e.store.VerifyLedger(ctx, ep)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() {
				t.Fatal("tampering not detected")
			}
			if rep.Broken.Seq != tc.want {
				t.Fatalf("broken at %d (%s), want %d", rep.Broken.Seq, rep.Broken.Reason, tc.want)
			}
		})
	}
}

// The kernel role cannot rewrite history, and even the owner cannot without
// deliberately disabling the trigger.
func TestLedgerAppendOnly(t *testing.T) {
	e := newEnv(t)
	ep := ledgerEpisode(t, e)
	ctx := ctxT(t)
	kernel, err := pgx.Connect(ctx, e.cluster.KernelConnString(e.db))
	if err != nil {
		t.Fatal(err)
	}
	defer kernel.Close(ctx)
	for _, q := range []string{
		`UPDATE events SET kind = 'x' WHERE episode_id = $1`,
		`DELETE FROM events WHERE episode_id = $1`,
		`TRUNCATE events`,
		`DELETE FROM episodes WHERE id = $1`,
		`UPDATE schema_migrations SET checksum = 'x' WHERE version = 1 AND $1::uuid IS NOT NULL`,
	} {
		args := []any{ep}
		if q == `TRUNCATE events` {
			args = nil
		}
		_, err := kernel.Exec(ctx, q, args...)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "42501" {
			t.Errorf("kernel role %q: got %v, want insufficient_privilege", q, err)
		}
	}
	var role string
	if err := kernel.QueryRow(ctx, `SELECT current_user`).Scan(&role); err != nil || role != pgcluster.KernelRole {
		t.Fatalf("connected as %q", role)
	}
	admin := e.admin()
	for _, q := range []string{`UPDATE events SET kind = 'x' WHERE episode_id = $1`, `DELETE FROM events WHERE episode_id = $1`} {
		_, err := admin.Exec(ctx, q, ep)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "42501" {
			t.Errorf("owner %q: got %v, want the append-only trigger to refuse", q, err)
		}
	}
	mustVerify(t, e.store, ep)
}
