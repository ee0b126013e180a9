package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
)

// TestOneKernelPerStateDir: a second kernel on a running kernel's
// state_dir is refused before it touches the store (with a managed
// cluster, its orphan recovery would otherwise stop the live kernel's
// postmaster — make demo run twice did exactly that), and the first kernel
// keeps serving. After the first stops, the state_dir is free again.
func TestOneKernelPerStateDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := servertest.New(t, "lock", nil).Config
	start := func() (func() error, error) { return Start(ctx, cfg, hclog.NewNullLogger(), Hooks{}) }
	stop, err := start()
	if err != nil {
		t.Fatalf("the first kernel did not start: %v", err)
	}
	if second, err := start(); err == nil {
		_ = second()
		t.Fatal("a second kernel started on the same state_dir")
	} else if !errors.Is(err, ErrStateDirBusy) {
		t.Fatalf("second kernel: %v, want ErrStateDirBusy", err)
	}
	if _, err := api.NewClient(cfg.APISocket()).Episodes(ctx, 1); err != nil {
		t.Fatalf("the first kernel stopped answering: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("first kernel: %v", err)
	}
	again, err := start()
	if err != nil {
		t.Fatalf("the state_dir stayed locked after the kernel stopped: %v", err)
	}
	if err := again(); err != nil {
		t.Fatal(err)
	}
}
