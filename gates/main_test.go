package gates

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/store/pgcluster"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// world is what every gate shares: one launcher install (with the in-domain
// effect client in its rootfs) and one PostgreSQL cluster.
type world struct {
	bed     *testbed.Bed
	cluster *pgcluster.Cluster
	tmp     string // the cluster's directory
	err     error
}

// shared is set once by TestMain before any test runs.
var shared world

// effectClientPath is where the static autonomic-effect sits in the rootfs.
const effectClientPath = testbed.EffectClientPath

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		shared.err = setUp()
	} else {
		shared.err = fmt.Errorf("gates need root")
	}
	code := m.Run()
	if shared.cluster != nil {
		_ = shared.cluster.Stop(context.Background())
	}
	if shared.bed != nil {
		if code == 0 {
			_ = shared.bed.Close()
		} else {
			shared.bed.RemoveCgroups()
		}
	}
	if shared.tmp != "" {
		_ = os.RemoveAll(shared.tmp)
	}
	os.Exit(code)
}

func setUp() error {
	tmp, err := os.MkdirTemp("", "autonomic-gates-")
	if err != nil {
		return err
	}
	shared.tmp = tmp
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if shared.bed, err = testbed.New(context.Background(), testbed.Options{Spec: "rootfs-builder/specs/worker.json", EffectClient: true}); err != nil {
		return err
	}
	db := filepath.Join(tmp, "pg")
	if err := os.Mkdir(db, 0o755); err != nil {
		return err
	}
	shared.cluster, err = storetest.StartCluster(db)
	return err
}
