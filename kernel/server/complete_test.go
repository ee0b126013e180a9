package server

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestCompleteOnlyByTheDrivingKernel: two kernels share one database; the
// one that does not drive an episode refuses to complete it with
// illegal_transition and changes nothing, while the driving one can.
// Completion vouches for work only the driving kernel sees.
func TestCompleteOnlyByTheDrivingKernel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newUnsafeFixture(t)
	a := servertest.New(t, "two_kernels", f.keys("-a", "kernel-a"))
	b := a.Peer(t, f.keys("-b", "kernel-b"))
	stopA, err := Start(ctx, a.Config, hclog.NewNullLogger(), Hooks{})
	if err != nil {
		t.Fatalf("serve a: %v", err)
	}
	defer stopA()
	ca := api.NewClient(a.Config.APISocket())
	started, err := ca.Start(ctx, f.spec(t, []string{"/bin/sleep", "120"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	// b starts after the episode exists: its recovery finds the episode
	// owned by a live kernel and leaves it alone.
	stopB, err := Start(ctx, b.Config, hclog.NewNullLogger(), Hooks{})
	if err != nil {
		t.Fatalf("serve b: %v", err)
	}
	defer stopB()
	cb := api.NewClient(b.Config.APISocket())

	before, err := cb.Events(ctx, started.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cb.Complete(ctx, started.ID, "not mine to vouch for")
	if protocol.AsWire(err).Code != protocol.CodeIllegalTransition {
		t.Fatalf("complete through the other kernel: %v, want illegal_transition", err)
	}
	v, err := cb.Episode(ctx, started.ID)
	if err != nil || v.State != "active" || v.Live != nil {
		t.Fatalf("through b after its refusal: state %q live %+v err %v (want active in the store, not driven by b)", v.State, v.Live, err)
	}
	after, err := cb.Events(ctx, started.ID, 0, 1000)
	if err != nil || len(after) != len(before) {
		t.Fatalf("the refusal wrote to the ledger: %d events before, %d after (%v)", len(before), len(after), err)
	}
	if v, err := ca.Episode(ctx, started.ID); err != nil || v.Live == nil || v.Live.State != "running" {
		t.Fatalf("the driving kernel's view after b's refusal: %+v %v", v.Live, err)
	}

	if v, err := ca.Complete(ctx, started.ID, "accepted"); err != nil || v.State != "completed" {
		t.Fatalf("complete through the driving kernel: %q %v", v.State, err)
	}
	if v, err := cb.Episode(ctx, started.ID); err != nil || v.State != "completed" {
		t.Fatalf("b's view of the store after a's completion: %q %v", v.State, err)
	}
}
