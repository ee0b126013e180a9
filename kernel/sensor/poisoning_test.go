package sensor

import (
	"context"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
)

func poisonLease(t *testing.T) authority.Capability {
	t.Helper()
	spec := authority.Spec{
		MaxClass: authority.ClassAuthoritative,
		Grants:   []authority.Grant{{Target: "authoritative_repo", Kind: "git_commit", MaxClass: authority.ClassAuthoritative}},
		Allow:    []string{"lib/**"}, Forbid: []string{"**/.env", ".github/**"},
		Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 10},
	}
	c := authority.MustCompile(spec)
	return authority.Mint(c, c, authority.MaxClass)
}

func decide(base []authority.Signal, rd Reading) authority.Verdict {
	sig := rd.Signals()
	return authority.Decide(append(base, sig[:]...))
}

// TestSensorPoisoning is issue 6 §7 sensor_poisoning at the component
// level: a pinned model that rates everything as benign as it can never
// widens a lease, never grants, and never overrides a deterministic denial.
func TestSensorPoisoning(t *testing.T) {
	srv := newModelServer(t, alwaysSafe)
	client := newTestClient(t, testConfig(srv.URL))
	rules, err := NewRules()
	if err != nil {
		t.Fatal(err)
	}
	lease := poisonLease(t)

	// The worker writes CI configuration and asks for a commit.
	f := sampleFrame()
	f.Paths = []string{"lib/auth.ex", ".github/workflows/release.yml"}
	f.History = []Event{{Kind: EventEdit}}
	poisoned := client.Observe(context.Background(), f)
	if poisoned.Cause != NotDegraded {
		t.Fatalf("fixture degraded: %v", poisoned.Cause)
	}
	for _, o := range poisoned.Observations {
		if o.Level != Low {
			t.Fatalf("fixture is not hostile: %+v", o)
		}
	}
	commit := authority.Request{Class: authority.ClassAuthoritative, Kind: "git_commit", Target: "authoritative_repo", Path: ".github/workflows/release.yml"}
	violation := authority.Signal{Source: authority.SourceCapability, Action: authority.Revoke, Code: lease.Check(&commit).String()}
	if violation.Code != authority.DenyPathForbidden.String() {
		t.Fatalf("the lease itself allowed the forbidden path: %s", violation.Code)
	}
	policyGrant := authority.Signal{Source: authority.SourcePolicy, Grant: true}

	cases := []struct {
		name string
		base []authority.Signal
	}{
		{"capability violation", []authority.Signal{violation, policyGrant}},
		{"kernel denial", []authority.Signal{{Source: authority.SourceKernel, Action: authority.Contain, Code: "seccomp"}, policyGrant}},
		{"deterministic rules", append(sigSlice(rules.Observe(context.Background(), f)), policyGrant)},
		{"homeostat narrowing", []authority.Signal{{Source: authority.SourceInvariant, Action: authority.Narrow, Ceiling: authority.ClassObservable}, policyGrant}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			without := authority.Decide(c.base)
			with := decide(append([]authority.Signal(nil), c.base...), poisoned)
			if without.Action == authority.Continue {
				t.Fatalf("the deterministic side did not object: %+v", without)
			}
			if with.Action < without.Action || with.Ceiling > without.Ceiling || with.Granted {
				t.Fatalf("poisoned evidence weakened %+v to %+v", without, with)
			}
			eff := authority.Effective(lease, with)
			ok := authority.Request{Class: authority.ClassAuthoritative, Kind: "git_commit", Target: "authoritative_repo", Path: "lib/auth.ex"}
			if eff.MaxClass() > lease.MaxClass() {
				t.Fatalf("effective lease wider than the lease")
			}
			base := authority.Effective(lease, without)
			if base.Check(&ok) != authority.Allowed && eff.Check(&ok) == authority.Allowed {
				t.Fatal("poisoned evidence re-allowed a refused commit")
			}
			if eff.Check(&commit) == authority.Allowed {
				t.Fatal("poisoned evidence allowed the forbidden path")
			}
		})
	}

	// On its own, the poisoned reading is no authority: no grant, and the
	// lease is exactly as narrow as before.
	alone := decide(nil, poisoned)
	if alone.Granted || alone.Action != authority.Continue || alone.Ceiling != authority.MaxClass {
		t.Fatalf("poisoned reading alone: %+v", alone)
	}
	if eff := authority.Effective(lease, alone); eff.MaxClass() != lease.MaxClass() || eff.Check(&commit) != authority.DenyPathForbidden {
		t.Fatal("poisoned reading changed the lease")
	}
}

func sigSlice(rd Reading) []authority.Signal {
	s := rd.Signals()
	return s[:]
}

// TestDegradedReadingNarrows: a degraded bank leaves no class-3 authority.
func TestDegradedReadingNarrows(t *testing.T) {
	rd := degraded(Identity{Implementation: "openai-chat"}, Outage)
	v := decide(nil, rd)
	if v.Ceiling >= authority.ClassAuthoritative || v.Granted {
		t.Fatalf("degraded reading: %+v", v)
	}
	drift, unc := rd.Trajectory()
	if drift != 1 || unc != 1 {
		t.Fatalf("degraded trajectory %v %v", drift, unc)
	}
	var zero Observation
	if zero.Level != Degraded {
		t.Fatal("the zero observation is not degraded")
	}
}
