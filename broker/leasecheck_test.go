package broker

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/google/uuid"
)

// The broker's tests use the kernel's lease check itself
// (governor.LeaseCheckWith, linked in by production_lease_test.go), under a
// verdict the test sets.

// testVerdict is the standing verdict a test's lease check applies.
type testVerdict struct {
	v atomic.Pointer[authority.Verdict]
}

func (tv *testVerdict) set(signals ...authority.Signal) {
	v := authority.Decide(signals)
	tv.v.Store(&v)
}

func (tv *testVerdict) check(ctx context.Context, q LeaseQuery) error {
	if ProductionLeaseCheck == nil {
		panic("the production lease check was not linked into the broker's tests (production_lease_test.go)")
	}
	return ProductionLeaseCheck(func(uuid.UUID) authority.Verdict {
		if p := tv.v.Load(); p != nil {
			return *p
		}
		return authority.Decide(nil)
	})(ctx, q)
}

// ProductionLeaseCheck is the kernel's own lease check
// (governor.LeaseCheckWith), which the broker's package cannot import: an
// external test file of this test binary sets it, so these tests exercise
// the check the kernel runs, not a copy of it.
var ProductionLeaseCheck func(verdict func(uuid.UUID) authority.Verdict) LeaseCheck

// leaseDoc is a lease document for spec, as the kernel records one.
func leaseDoc(t testing.TB, spec authority.Spec) json.RawMessage {
	t.Helper()
	c, err := authority.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := authority.EncodeLease(c)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// wideSpec grants every kind the broker tests use on their targets, every
// path but the defaults, and budgets no test reaches.
func wideSpec() authority.Spec {
	var grants []authority.Grant
	for kind, g := range map[string]struct {
		class   authority.Class
		targets []string
	}{
		"artifact":      {4, []string{"releases", "reports", "rel", "etc", "pub"}},
		"git_commit":    {3, []string{"repo"}},
		"git_remote":    {3, []string{"pub", "pub-private", "pub-rewind", "remote", "origin", "anon", "wrong", "auth"}},
		"http_read":     {2, []string{"docs", "api", "web", "evil", "sneaky", "public-only", "tls", "untrusted", "cgnat", "nat64", "sixtofour", "mapped", "sitelocal"}},
		"http_mutation": {3, []string{"api", "docs", "web"}},
	} {
		for _, target := range g.targets {
			grants = append(grants, authority.Grant{Kind: kind, Target: target, MaxClass: g.class})
		}
	}
	return authority.Spec{MaxClass: authority.MaxClass, Grants: grants, Allow: []string{"**"}, Forbid: []string{},
		Budget: authority.Budget{BytesPerEffect: authority.MaxBudget, BytesTotal: authority.MaxBudget, EffectsPerMinute: 1 << 20}}
}
