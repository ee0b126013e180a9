package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// TestOneKernelPerStateDir: a second kernel on a running kernel's
// state_dir is refused before it touches the store (with a managed
// cluster, its orphan recovery would otherwise stop the live kernel's
// postmaster — make demo run twice did exactly that), and the first kernel
// keeps serving. After the first stops, the state_dir is free again.
func TestOneKernelPerStateDir(t *testing.T) {
	cluster := storetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateDatabase(ctx, "lock"); err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(map[string]any{
		"state_dir": t.TempDir(),
		"store":     map[string]any{"url": cluster.KernelConnString("lock"), "admin_url": cluster.AdminConnString("lock")},
		"domain":    map[string]any{"backend": "unsafe_local"},
		"sensor":    map[string]any{"kind": "rules"},
	})
	p := filepath.Join(t.TempDir(), "autonomic.json")
	if err := os.WriteFile(p, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	start := func() (func() error, chan error) {
		sctx, stop := context.WithCancel(ctx)
		ready, done := make(chan struct{}), make(chan error, 1)
		go func() { done <- Serve(sctx, cfg, hclog.NewNullLogger(), Hooks{Ready: func() { close(ready) }}) }()
		select {
		case <-ready:
		case err := <-done:
			stop()
			done <- err
			return nil, done
		}
		return func() error { stop(); return <-done }, done
	}
	stop, _ := start()
	if stop == nil {
		t.Fatal("the first kernel did not start")
	}
	if second, done := start(); second != nil {
		second()
		t.Fatal("a second kernel started on the same state_dir")
	} else if err := <-done; !errors.Is(err, ErrStateDirBusy) {
		t.Fatalf("second kernel: %v, want ErrStateDirBusy", err)
	}
	if _, err := api.NewClient(cfg.APISocket()).Episodes(ctx, 1); err != nil {
		t.Fatalf("the first kernel stopped answering: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("first kernel: %v", err)
	}
	again, _ := start()
	if again == nil {
		t.Fatal("the state_dir stayed locked after the kernel stopped")
	}
	if err := again(); err != nil {
		t.Fatal(err)
	}
}
