package pgcluster

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/jackc/pgx/v5"
)

// startTestCluster starts a throwaway cluster as the service account; root
// is needed to switch to it.
func startTestCluster(t *testing.T) *Cluster {
	t.Helper()
	cfg := testClusterConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// testClusterConfig is a fresh temp directory, run as the service account.
func testClusterConfig(t *testing.T) Config {
	t.Helper()
	privileged.Require(t)
	acct, err := ServiceAccount()
	if err != nil {
		privileged.Skip(t, err.Error())
	}
	dir, err := os.MkdirTemp("", "autonomic-pgc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return Config{Dir: dir, RunAs: &acct, NoSyncInit: true}
}

func TestRefusesRoot(t *testing.T) {
	if _, err := credentialFor(&Account{Name: "root", UID: 0}); err == nil {
		t.Fatal("uid 0 account accepted")
	}
	if os.Geteuid() == 0 {
		if _, err := credentialFor(nil); err == nil {
			t.Fatal("root without an account accepted")
		}
	}
}

func TestClusterLifecycle(t *testing.T) {
	c := startTestCluster(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.AdminConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var fsync, sync, listen, user string
	if err := conn.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'),
		current_setting('listen_addresses'), (SELECT usename FROM pg_stat_activity WHERE pid = pg_backend_pid())`).
		Scan(&fsync, &sync, &listen, &user); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if fsync != "on" || sync != "on" || listen != "" {
		t.Fatalf("fsync=%q synchronous_commit=%q listen_addresses=%q", fsync, sync, listen)
	}
	// The server process must not be root.
	if uid := procUID(t, c.PID()); uid == 0 {
		t.Fatal("postgres runs as root")
	}
	// Kernel role can log in; wrong password cannot.
	kc, err := pgx.Connect(ctx, c.KernelConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	kc.Close(ctx)
	if _, err := pgx.Connect(ctx, c.connString(KernelRole, "wrong", "postgres")); err == nil {
		t.Fatal("wrong password accepted")
	}

	// Crash and recover, with a backend alive at the time of the crash.
	held, err := pgx.Connect(ctx, c.AdminConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, c.AdminConnString("postgres")); err == nil {
		t.Fatal("connected to a killed cluster")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, c.AdminConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if _, err := held.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("connection survived the crash")
	}

	// A clean stop, then a fresh Start on the same directory reuses the
	// cluster and its secrets instead of initialising a new one.
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c.PID() != 0 {
		t.Fatal("still running after Stop")
	}
	again, err := Start(ctx, c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop(context.Background())
	kc, err = pgx.Connect(ctx, again.KernelConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	kc.Close(ctx)
}

// TestStartAfterKernelCrashReusesTheCluster: a kernel that died without
// stopping its cluster leaves the postmaster running; the next Start stops
// that orphan and serves the same data again.
func TestStartAfterKernelCrashReusesTheCluster(t *testing.T) {
	cfg := testClusterConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.CreateDatabase(ctx, "survivor"); err != nil {
		t.Fatal(err)
	}
	orphan := first.PID()
	// The "crashed kernel" never calls Stop: its postmaster keeps running.
	second, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start after a crash: %v", err)
	}
	t.Cleanup(func() { _ = second.Stop(context.Background()) })
	if alive(orphan) {
		t.Fatalf("the orphaned postmaster %d is still running", orphan)
	}
	conn, err := pgx.Connect(ctx, second.AdminConnString("survivor"))
	if err != nil {
		t.Fatalf("data not reused: %v", err)
	}
	_ = conn.Close(ctx)
}
