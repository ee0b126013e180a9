package episode_test

import (
	"context"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
)

// TestReportHealthCapsLeases: database loss reported from outside the
// episodes (serve's store probe) drops autonomy to observe at once and
// caps the next lease at class 1; the store's recovery clears only its own
// fault, so a semantic outage reported meanwhile still holds it at advise.
func TestReportHealthCapsLeases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg := liveRegulator(t, regulator.Config{Start: regulator.Act, Max: regulator.Act, RecoverAfter: 1})
	r := newRig(t, ctx, "episode_report_health", withRegulator(reg))
	reg.Report(regulator.DatabaseLoss, regulator.DatabaseLoss)
	if l := reg.State().Level; l != regulator.Observe {
		t.Fatalf("after database loss: %v", l)
	}
	e, err := r.k.Start(ctx, r.spec(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c := e.Status().Lease.MaxClass(); c != authority.ClassIsolated {
		t.Fatalf("lease under observe: class %d", c)
	}
	if err := e.End(ctx, episode.Aborted, "test done"); err != nil {
		t.Fatal(err)
	}
	reg.Report(regulator.SemanticOutage|regulator.UnpinnedModel, regulator.SemanticOutage)
	for range 4 {
		reg.Report(regulator.DatabaseLoss, 0)
	}
	if st := reg.State(); st.Level != regulator.Advise || st.Faults != regulator.SemanticOutage {
		t.Fatalf("store healthy, sensor not: %v (%v)", st.Level, st.Faults)
	}
	reg.Report(regulator.SemanticOutage|regulator.UnpinnedModel, 0)
	if l := reg.State().Level; l != regulator.Act {
		t.Fatalf("all healthy: %v", l)
	}
}
