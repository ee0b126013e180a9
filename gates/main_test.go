package gates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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
	kernel  string // this tree's autonomic binary, which the scenario runs
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
	mod, err := testbed.ModuleRoot()
	if err != nil {
		return err
	}
	shared.kernel = filepath.Join(tmp, "autonomic")
	if os.Getenv(testbed.PrebuiltEnv) != "" {
		// No Go toolchain here (the host matrix's guests): the kernel this
		// tree built is the one installed with the prebuilt binaries.
		if shared.kernel, err = exec.LookPath("autonomic"); err != nil {
			return fmt.Errorf("prebuilt kernel: %w", err)
		}
	} else {
		build := exec.Command("go", "build", "-o", shared.kernel, "./kernel/cmd/autonomic")
		build.Dir = mod
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("build the kernel: %v\n%s", err, out)
		}
	}
	db := filepath.Join(tmp, "pg")
	if err := os.Mkdir(db, 0o755); err != nil {
		return err
	}
	if shared.cluster, err = storetest.StartCluster(db); err != nil {
		return err
	}
	if path := os.Getenv(BuiltEnv); path != "" {
		return recordBuilt(path, shared.bed)
	}
	return nil
}

// recordBuilt writes what this run built and runs (see Built) for qc.
func recordBuilt(path string, bed *testbed.Bed) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := bed.Domains().Preflight(ctx)
	if err != nil {
		return fmt.Errorf("preflight of the built launcher: %w", err)
	}
	x := Built{RootfsDigest: bed.RootfsDigest, Preflight: rep,
		Kernel: "autonomic (kernel/cmd/autonomic) as the gates built it; the scenario runs it as the service account"}
	if x.LauncherSHA256, err = fileSHA256(bed.Launcher); err != nil {
		return err
	}
	if x.KernelSHA256, err = fileSHA256(shared.kernel); err != nil {
		return err
	}
	return RecordBuilt(path, x)
}

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
