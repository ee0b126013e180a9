package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// bootedKernel is `autonomic serve` composed in-process on a real
// launcher (run directly), the worker rootfs with the effect client, and
// a real cluster.
type bootedKernel struct {
	tmp     string // a 0755 directory removed at the end
	cfgPath string
	cfg     *config.Config
	logs    *lockedBuffer
	stop    func() error
	restart func() // stops the kernel and starts it again on the same state
}

// bootKernel writes a configuration of doc plus state_dir, store, domain
// and api.socket (doc's "api" keys are kept), and serves it.
func bootKernel(t *testing.T, ctx context.Context, doc map[string]any) *bootedKernel {
	t.Helper()
	privileged.Require(t)
	bed, err := testbed.New(ctx, testbed.Options{Spec: "rootfs-builder/specs/worker.json", EffectClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			bed.RemoveCgroups()
			return
		}
		_ = bed.Close()
	})
	tmp, err := os.MkdirTemp("", "autonomic-kernel-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	os.Chmod(tmp, 0o755) // the cluster's account must reach it
	cluster := storetest.Start(t)
	if err := cluster.CreateDatabase(ctx, "kernel"); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(testbed.CgroupV2Mount(), bed.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	doc["state_dir"] = filepath.Join(tmp, "state")
	doc["store"] = map[string]any{"url": cluster.KernelConnString("kernel"), "admin_url": cluster.AdminConnString("kernel")}
	doc["domain"] = map[string]any{"backend": "linux", "launcher_path": bed.Launcher, "direct": true,
		"workspaces_root": bed.Workspaces, "sockets_root": bed.Sockets, "cgroup_parent": "/" + rel}
	if doc["episode"] == nil {
		doc["episode"] = map[string]any{"checkpoints_dir": filepath.Join(bed.State, "checkpoints")}
	}
	a, _ := doc["api"].(map[string]any)
	if a == nil {
		a = map[string]any{}
	}
	a["socket"] = filepath.Join(tmp, "api.sock")
	doc["api"] = a
	raw, _ := json.Marshal(doc)
	k := &bootedKernel{tmp: tmp, cfgPath: filepath.Join(tmp, "autonomic.json"), logs: &lockedBuffer{}}
	if err := os.WriteFile(k.cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if k.cfg, err = config.Load(k.cfgPath); err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "autonomic", Output: k.logs, JSONFormat: true, Level: hclog.Info})
	owner := [2]int{bed.OwnerUID, bed.OwnerGID}
	k.stop = startServe(t, ctx, k.cfg, log, k.logs, &owner)
	k.restart = func() {
		t.Helper()
		if err := k.stop(); err != nil {
			t.Fatal(err)
		}
		k.stop = startServe(t, ctx, k.cfg, log, k.logs, &owner)
	}
	return k
}
