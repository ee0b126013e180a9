package governor

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/homeostat"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// bareRecord is a trajectory record with a homeostat and no regulator:
// enough for the slow loop's verdict and the commit horizon's reading of it.
func bareRecord(t *testing.T, maxRisk float64) *Record {
	t.Helper()
	home, err := homeostat.New(homeostat.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &Record{g: &Governor{}, home: home, ep: Episode{MaxRisk: maxRisk}}
}

func reading(level sensor.Level) sensor.Reading {
	var r sensor.Reading
	for i, name := range sensor.Bank() {
		r.Observations[i] = sensor.Observation{Sensor: name, Level: level}
	}
	return r
}

// commitLease is a lease granting class 3 git_commit and class 2 reads,
// with room for every test here.
func commitLease(t *testing.T, perMinute int64) []byte {
	t.Helper()
	doc, err := authority.EncodeLease(authority.MustCompile(authority.Spec{MaxClass: authority.ClassAuthoritative,
		Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}, {Target: "docs", Kind: "http_read", MaxClass: 2}},
		Allow:  []string{"**"}, Forbid: []string{},
		Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 30, EffectsPerMinute: perMinute}}))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestMaxRiskDecides: semantic.max_risk, signed in the policy, decides.
// The same bank reading (every sensor medium, risk 0.5) passes under a
// policy whose max_risk is 0.65 and yields under one whose max_risk is
// 0.3: the evaluation's verdict no longer reaches class 3, and the commit
// horizon refuses a class 3 commit while still allowing a class 2 read.
func TestMaxRiskDecides(t *testing.T) {
	grant := authority.Signal{Source: authority.SourcePolicy, Grant: true, Code: "lease"}
	commit := broker.LeaseQuery{Lease: commitLease(t, 100), Kind: "git_commit", TargetID: "repo", Class: 3, Bytes: 10,
		Touches: []broker.Touch{{Path: "lib/a.go"}}}
	read := broker.LeaseQuery{Lease: commitLease(t, 100), Kind: "http_read", TargetID: "docs", Class: 2, Bytes: 10}
	for _, tc := range []struct {
		name     string
		maxRisk  float64
		level    sensor.Level
		proceeds bool
	}{
		{"medium under 0.65", 0.65, sensor.Medium, true},
		{"medium over 0.3", 0.3, sensor.Medium, false},
		{"low under 0.3", 0.3, sensor.Low, true},
		{"low over 0.05", 0.05, sensor.Low, false},
		{"high never proceeds", 1, sensor.High, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := bareRecord(t, tc.maxRisk)
			v := authority.Decide(append(bankSignals([]sensor.Reading{reading(tc.level)}, e.ep.MaxRisk), grant))
			if got := v.Action < authority.Revoke && v.Ceiling >= authority.ClassAuthoritative; got != tc.proceeds {
				t.Fatalf("evaluation verdict %+v: proceeds=%v, want %v", v, got, tc.proceeds)
			}
			e.holdSlow(v)
			check := LeaseCheckWith(func(uuid.UUID) authority.Verdict { return e.commitVerdict() })
			err := check(context.Background(), commit)
			if tc.proceeds != (err == nil) {
				t.Fatalf("commit after the evaluation: %v, proceeds=%v", err, tc.proceeds)
			}
			if err != nil && protocol.AsWire(err).Code != protocol.CodeForbidden {
				t.Fatalf("refusal %v, want forbidden", err)
			}
			if tc.level != sensor.High {
				if err := check(context.Background(), read); err != nil {
					t.Fatalf("a yield to class 2 refused a read: %v", err)
				}
			}
		})
	}
	// A degraded reading is risk 1: above every max_risk below 1.
	var degraded sensor.Reading
	degraded.Cause = sensor.Timeout
	if sig := bankSignals([]sensor.Reading{degraded}, 0.99); sig[len(sig)-1].Code != "max_risk" {
		t.Fatal("a degraded reading is within max_risk 0.99")
	}
}

// TestThrottleTakesEffect: the slow loop's Throttle (a medium reading)
// is held for the commit horizon, where it halves the lease's
// effects_per_minute against the durable count.
func TestThrottleTakesEffect(t *testing.T) {
	e := bareRecord(t, 0.65)
	check := LeaseCheckWith(func(uuid.UUID) authority.Verdict { return e.commitVerdict() })
	q := broker.LeaseQuery{Lease: commitLease(t, 4), Kind: "http_read", TargetID: "docs", Class: 2, Bytes: 1,
		Spent: store.Spend{LastMinute: 2}}
	if err := check(context.Background(), q); err != nil {
		t.Fatalf("2 of 4 per minute, unthrottled: %v", err)
	}
	v := authority.Decide(bankSignals([]sensor.Reading{reading(sensor.Medium)}, e.ep.MaxRisk))
	if v.Action != authority.Throttle {
		t.Fatalf("medium reading: %v", v.Action)
	}
	e.holdSlow(v)
	if err := check(context.Background(), q); protocol.AsWire(err).Code != protocol.CodeRateLimited {
		t.Fatalf("2 of 4 per minute, throttled to 2: %v, want rate_limited", err)
	}
	e.holdSlow(authority.Decide(bankSignals([]sensor.Reading{reading(sensor.Low)}, e.ep.MaxRisk)))
	if err := check(context.Background(), q); err != nil {
		t.Fatalf("the next evaluation lifted the throttle, yet: %v", err)
	}
}
