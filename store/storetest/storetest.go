// Package storetest starts throwaway PostgreSQL clusters for tests, with the
// same code the kernel uses for its managed cluster (store/pgcluster).
//
// Invariant: a throwaway cluster lives in the directory the caller gives it
// and is never run as root: as root it runs as the service account, as
// anyone else it runs as the caller.
package storetest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/store/pgcluster"
)

// StartCluster starts a cluster in dir, which must exist.
func StartCluster(dir string) (*pgcluster.Cluster, error) {
	cfg := pgcluster.Config{Dir: dir, NoSyncInit: true}
	if os.Geteuid() == 0 {
		acct, err := pgcluster.ServiceAccount()
		if err != nil {
			return nil, err
		}
		// Start chowns dir to the account; the temp dir above it must be
		// traversable by it.
		cfg.RunAs = &acct
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return pgcluster.Start(ctx, cfg)
}

// Start starts a throwaway cluster for one test, in a temp dir, and stops
// and removes it when the test ends. Without a cluster the test is skipped
// through privileged.Skip (a failure when privileged tests are mandatory).
func Start(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "autonomic-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := StartCluster(dir)
	if err != nil {
		privileged.Skip(t, "no PostgreSQL cluster: "+err.Error())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}
