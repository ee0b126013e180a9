package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store/migrations"
	"github.com/jackc/pgx/v5"
)

func emptyDB(t *testing.T) (*env, func() *pgx.Conn) {
	t.Helper()
	e := &env{t: t, cluster: testHarness.Cluster, db: testHarness.Database(t, "m")}
	return e, e.admin
}

func setFS(t *testing.T, extra map[string]string, edit bool) []migrations.Migration {
	t.Helper()
	base, err := migrations.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{}
	for _, m := range base {
		sql := m.SQL
		if edit && m.Version == 1 {
			sql += "\n-- an innocent-looking edit\n"
		}
		fsys["sql/"+m.Name] = &fstest.MapFile{Data: []byte(sql)}
	}
	for name, sql := range extra {
		fsys["sql/"+name] = &fstest.MapFile{Data: []byte(sql)}
	}
	set, err := migrations.Load(fsys, "sql")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// embeddedCount is how many migrations this binary carries; a test's
// extra migration is the next one.
func embeddedCount(t *testing.T) int {
	t.Helper()
	base, err := migrations.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return len(base)
}

func nextName(label string) string {
	base, _ := migrations.Embedded()
	return fmt.Sprintf("%04d_%s.sql", len(base)+1, label)
}

func TestMigrations(t *testing.T) {
	ctx := ctxT(t)
	embedded, err := migrations.Embedded()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("empty database, then idempotent", func(t *testing.T) {
		e, admin := emptyDB(t)
		conn := admin()
		// The kernel role alone cannot start on an unmigrated database.
		_, err := Open(ctx, Config{URL: e.cluster.KernelConnString(e.db), InstanceID: "k"})
		if !errors.Is(err, migrations.ErrIncomplete) {
			t.Fatalf("kernel-only open of empty db: %v", err)
		}
		n, err := migrations.Apply(ctx, conn, embedded)
		if err != nil || n != len(embedded) {
			t.Fatalf("first apply: %d, %v", n, err)
		}
		n, err = migrations.Apply(ctx, conn, embedded)
		if err != nil || n != 0 {
			t.Fatalf("re-apply: %d, %v", n, err)
		}
		s, err := Open(ctx, Config{URL: e.cluster.KernelConnString(e.db), InstanceID: "k"})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	})

	t.Run("concurrent appliers apply once", func(t *testing.T) {
		e, _ := emptyDB(t)
		var wg sync.WaitGroup
		counts := make([]int, 4)
		errs := make([]error, 4)
		for i := range counts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := pgx.Connect(ctx, e.cluster.AdminConnString(e.db))
				if err != nil {
					errs[i] = err
					return
				}
				defer c.Close(ctx)
				counts[i], errs[i] = migrations.Apply(ctx, c, embedded)
			}()
		}
		wg.Wait()
		total := 0
		for i := range counts {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			total += counts[i]
		}
		if total != len(embedded) {
			t.Fatalf("applied %d times", total)
		}
	})

	t.Run("edited migration refused", func(t *testing.T) {
		e, admin := emptyDB(t)
		conn := admin()
		if _, err := migrations.Apply(ctx, conn, embedded); err != nil {
			t.Fatal(err)
		}
		_, err := migrations.Apply(ctx, conn, setFS(t, nil, true))
		if !errors.Is(err, migrations.ErrEdited) {
			t.Fatalf("edited migration: %v", err)
		}
		// The same, seen from a database whose recorded checksum differs
		// from this binary's.
		if _, err := conn.Exec(ctx, `UPDATE schema_migrations SET checksum = repeat('0', 64) WHERE version = 1`); err != nil {
			t.Fatal(err)
		}
		_, err = Open(ctx, Config{URL: e.cluster.KernelConnString(e.db), AdminURL: e.cluster.AdminConnString(e.db), InstanceID: "k"})
		if !errors.Is(err, migrations.ErrEdited) || code(err) != protocol.CodeInternal {
			t.Fatalf("open against edited migration: %v", err)
		}
	})

	t.Run("newer schema refused, unchanged", func(t *testing.T) {
		e, admin := emptyDB(t)
		conn := admin()
		newer := setFS(t, map[string]string{nextName("future"): `CREATE TABLE future (x int);`}, false)
		if n, err := migrations.Apply(ctx, conn, newer); err != nil || n != embeddedCount(t)+1 {
			t.Fatalf("apply newer: %d %v", n, err)
		}
		for _, cfg := range []Config{
			{URL: e.cluster.KernelConnString(e.db), InstanceID: "k"},
			{URL: e.cluster.KernelConnString(e.db), AdminURL: e.cluster.AdminConnString(e.db), InstanceID: "k"},
		} {
			if _, err := Open(ctx, cfg); !errors.Is(err, migrations.ErrNewerSchema) {
				t.Fatalf("open against newer schema: %v", err)
			}
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != embeddedCount(t)+1 {
			t.Fatalf("schema_migrations has %d rows, %v", n, err)
		}
	})

	t.Run("failing migration rolls back entirely", func(t *testing.T) {
		_, admin := emptyDB(t)
		conn := admin()
		bad := setFS(t, map[string]string{nextName("bad"): `CREATE TABLE half (x int); SELECT 1/0;`}, false)
		if _, err := migrations.Apply(ctx, conn, bad); err == nil {
			t.Fatal("bad migration applied")
		}
		var half *string
		var version int
		if err := conn.QueryRow(ctx, `SELECT to_regclass('half')::text, (SELECT max(version) FROM schema_migrations)`).Scan(&half, &version); err != nil {
			t.Fatal(err)
		}
		if half != nil || version != embeddedCount(t) {
			t.Fatalf("partial migration left behind: table=%v version=%d", half, version)
		}
	})
}
