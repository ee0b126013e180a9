package governor

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/homeostat"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestFastLoopReportsContainment: the governor's watch child folds a
// critical frame (a seccomp violation) into the episode's homeostat and
// reports containment through the Contain callback it was given, bound to
// the frame's epoch; a frame of an older epoch (a destroyed generation) is
// ignored; and once the controller closes the record, the broker reads the
// episode as containment. The fast loop never touches the store (the slow
// loop does; its tests run in kernel/episode on a real one).
func TestFastLoopReportsContainment(t *testing.T) {
	g, err := New(Config{Store: struct{ store.Store }{}})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	var epoch atomic.Int64
	epoch.Store(2)
	type containment struct {
		epoch  int64
		reason string
	}
	contained := make(chan containment, 4)
	r := g.Open(Episode{ID: id, Epoch: epoch.Load, Lease: func() authority.Capability { return authority.Capability{} },
		Contain: func(e int64, why string) { contained <- containment{e, why} }})
	if _, regime := g.Trajectory(context.Background(), id); regime != homeostat.Stable.String() {
		t.Fatalf("a fresh record reads %s", regime)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Watch(ctx, func() {}) }()
	defer func() { cancel(); <-done }()

	violation := homeostat.Sample{Denial: homeostat.SeccompViolation}
	if err := r.Observe(1, violation, "violation: old", true); err != nil {
		t.Fatal(err)
	}
	if err := r.Observe(2, violation, "violation: socket", true); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-contained:
		if c.epoch != 2 || c.reason != "violation: socket" {
			t.Fatalf("contained %+v, want epoch 2's violation", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no containment reported")
	}
	select {
	case c := <-contained:
		t.Fatalf("a second containment %+v (the old epoch's frame was not ignored?)", c)
	case <-time.After(100 * time.Millisecond):
	}
	if _, regime := g.Trajectory(context.Background(), id); regime != homeostat.Containment.String() {
		t.Fatalf("after a violation the episode reads %s", regime)
	}
	g.Close(id)
	if v, regime := g.Trajectory(context.Background(), id); v != 0 || regime != homeostat.Containment.String() {
		t.Fatalf("a closed record reads %d %s", v, regime)
	}
}
