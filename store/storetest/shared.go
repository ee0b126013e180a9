package storetest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/store/pgcluster"
)

// Shared is one throwaway cluster for a whole test binary: TestMain starts
// it and runs the tests with Run; each test takes a database of its own.
type Shared struct {
	Cluster *pgcluster.Cluster
	Err     error // why there is no cluster
	dir     string
	seq     atomic.Int64
}

// StartShared starts the binary's cluster in a new temp dir named after
// prefix. A failure is kept in Err for the tests to report, not fatal here.
func StartShared(prefix string) *Shared {
	s := &Shared{}
	if s.dir, s.Err = os.MkdirTemp("", prefix); s.Err != nil {
		return s
	}
	// Tests may put files beside the cluster for other uids to reach.
	if s.Err = os.Chmod(s.dir, 0o755); s.Err != nil {
		return s
	}
	s.Cluster, s.Err = StartCluster(s.dir)
	return s
}

// Run runs the tests, then stops and removes the cluster; its result is
// TestMain's exit code.
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	if s.Cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = s.Cluster.Stop(ctx)
		cancel()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
	return code
}

// Database creates a database of t's own, named prefix and a sequence
// number. Without a cluster t is skipped through privileged.Skip (a failure
// when privileged tests are mandatory).
func (s *Shared) Database(t testing.TB, prefix string) string {
	t.Helper()
	if s.Cluster == nil {
		privileged.Skip(t, "no PostgreSQL cluster: "+s.Err.Error())
	}
	db := fmt.Sprintf("%s%d", prefix, s.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Cluster.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}
