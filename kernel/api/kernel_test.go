package api

import (
	"os"
	"sync/atomic"
	"testing"

	"github.com/autonomic-kernel/autonomic/store"
)

// TestKernelView: GET /v1/kernel answers the regulator's view as the
// kernel reports it, and an empty view without a controller.
func TestKernelView(t *testing.T) {
	me := Access{KernelUID: uint32(os.Getuid()), OperatorGID: -1}
	bare := newEnv(t, me)
	if v, err := bare.client.Kernel(ctxT(t)); err != nil || v.Autonomy != "" {
		t.Fatalf("without a controller: %+v %v", v, err)
	}
	var level atomic.Value
	level.Store("observe")
	e := newEnvWith(t, me, func(_ *store.Postgres, cfg *Config) {
		cfg.Kernel = func() KernelView { return KernelView{Autonomy: level.Load().(string), MaxClass: 1, Faults: "db_loss"} }
	})
	if v, err := e.client.Kernel(ctxT(t)); err != nil || v.Autonomy != "observe" || v.MaxClass != 1 || v.Faults != "db_loss" {
		t.Fatalf("kernel view: %+v %v", v, err)
	}
	level.Store("act")
	if v, err := e.client.Kernel(ctxT(t)); err != nil || v.Autonomy != "act" {
		t.Fatalf("kernel view after a change: %+v %v", v, err)
	}
}
