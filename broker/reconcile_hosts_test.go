package broker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestReconcileLeavesAnotherHostsEffects: a kernel starting on one host
// while another host's live kernel has an effect past the commit horizon
// neither touches that effect nor fails to start (its broker becomes
// ready); the owner settles it itself. Before, the start's reconciliation
// failed on the other host's episode and the kernel exited.
func TestReconcileLeavesAnotherHostsEffects(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pub")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"releases": {Dir: dir}}})
	})
	e.serve(1)
	p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "a.bin"}, []byte("a"))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
	req := byEffectReq(e, protocol.WorkerEvaluate, p)
	req.Approval = e.approve(p.ID)
	mustOK(t, e.do(req))
	id := uuid.MustParse(p.ID)
	// A kernel dies after commit_intent; this host's kernel (e.store,
	// kernel-a) takes the episode back and holds it, live.
	e.runCrash(crashSpec{ArtifactDir: dir, EffectID: id, Point: "after_intent"})
	ctx := ctxT(t)
	if _, err := e.store.AcquireOwnership(ctx, e.ep.ID); err != nil {
		t.Fatal(err)
	}
	// Another host's kernel starts on the same database.
	other, err := store.Open(ctx, store.Config{URL: e.cluster.KernelConnString(e.db), InstanceID: "kernel-b", OwnerTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	cfg := e.cfg
	cfg.Store = other
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	settled, err := b.Reconcile(ctx, uuid.Nil)
	if err != nil || len(settled) != 0 || !b.Ready() {
		t.Fatalf("another host's start: settled %v, %v, ready %v", settled, err, b.Ready())
	}
	if f, _ := e.store.Effect(ctx, id); f.State != store.CommitIntent {
		t.Fatalf("another host's kernel moved the effect to %s", f.State)
	}
	// Asked for that episode by name, it is still refused: only its owner
	// settles it.
	if _, err := b.Reconcile(ctx, e.ep.ID); err == nil {
		t.Fatal("reconciling another host's live episode by name was not refused")
	}
	if settled, err := e.broker.Reconcile(ctx, uuid.Nil); err != nil || len(settled) != 1 || settled[0].To != store.Aborted {
		t.Fatalf("the owner's reconciliation: %+v, %v", settled, err)
	}
}
