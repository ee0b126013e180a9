package governor

import (
	"context"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestDependencyLiftReachesTheBank: a verified class 3 change to
// package.json and its lock, weighed by the production rule bank at
// `autonomic run`'s max_risk (0.5), is denied under a lease that does not
// lift dependencies, and is not denied by the bank under one that does
// (autonomic run --lift dependencies): the lease's lift reaches the frame.
func TestDependencyLiftReachesTheBank(t *testing.T) {
	rules, err := sensor.NewRules()
	if err != nil {
		t.Fatal(err)
	}
	eff := store.Effect{Kind: "git_commit", TargetID: "repo", Class: 3}
	paths := []string{"package.json", "package-lock.json", "src/index.js"}
	history := []sensor.Event{{Kind: sensor.EventEdit}, {Kind: sensor.EventTestPassed}}
	for _, c := range []struct {
		lift []string
		deny bool
	}{{nil, true}, {[]string{authority.LiftDependencies}, false}} {
		lease := authority.MustCompile(authority.Spec{MaxClass: authority.ClassAuthoritative,
			Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}}, Allow: []string{"**"}, Forbid: []string{},
			Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 30, EffectsPerMinute: 60}, Lift: c.lift})
		e := bareRecord(t, 0.5)
		e.ep.Scope = []string{"**"}
		e.ep.Lease = func() authority.Capability { return lease }
		rd := rules.Observe(context.Background(), e.frame(eff, paths, []byte("+\"left-pad\": \"1.3.0\"\n"), history, false))
		v := authority.Decide(bankSignals([]sensor.Reading{rd}, e.ep.MaxRisk))
		// The slow loop's own test for this part of its verdict.
		if denied := !(v.Action < authority.Revoke && v.Ceiling >= authority.Class(eff.Class)); denied != c.deny {
			t.Errorf("lift %v: %s by %+v, want denied=%v (readings %+v)", c.lift, v.Action, v.Decider, c.deny, rd.Observations)
		}
	}
}
