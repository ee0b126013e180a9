package authority

import (
	"testing"
)

// The worked example of seed 000: a policy and an envelope for one
// git_commit target, with the target's path rules.
func seedLease(t testing.TB, ceiling Class) Capability {
	t.Helper()
	policy := MustCompile(Spec{
		MaxClass: ClassAuthoritative,
		Grants:   []Grant{{Target: "authoritative_repo", Kind: "git_commit", MaxClass: ClassAuthoritative}, {Target: "docs_read", Kind: "http_read", MaxClass: ClassObservable}},
		Allow:    []string{"lib/**"},
		Forbid:   []string{"test/**", ".env", "**/*secret*"},
		Budget:   Budget{BytesPerEffect: 1 << 20, BytesTotal: 8 << 20, EffectsPerMinute: 10},
	})
	envelope := MustCompile(Spec{
		MaxClass: ClassAuthoritative,
		Grants:   []Grant{{Target: "authoritative_repo", Kind: "git_commit", MaxClass: ClassAuthoritative}, {Target: "docs_read", Kind: "http_read", MaxClass: ClassObservable}},
		Allow:    []string{"**"},
		Forbid:   []string{"**/.git/**", ".github/**"},
		Budget:   Budget{BytesPerEffect: 512 << 10, BytesTotal: 64 << 20, EffectsPerMinute: 60},
	})
	return Mint(policy, envelope, ceiling)
}

func TestCheck(t *testing.T) {
	lease := seedLease(t, MaxClass)
	commit := func(p string) Request {
		return Request{Class: ClassAuthoritative, Kind: "git_commit", Target: "authoritative_repo", Path: p, Bytes: 100}
	}
	cases := []struct {
		name string
		req  Request
		want Reason
	}{
		{"commit in scope", commit("lib/auth.ex"), Allowed},
		{"deep path in scope", commit("lib/a/b/c.ex"), Allowed},
		{"forbidden by policy", commit("test/auth_test.exs"), DenyPathForbidden},
		{"secret anywhere", commit("lib/keys/my_secret.pem"), DenyPathForbidden},
		{"forbidden by envelope", commit("lib/.git/hooks/pre-commit"), DenyPathForbidden},
		{"outside allow", commit("README.md"), DenyPathNotAllowed},
		{"dot-dot spelled path", commit("lib/../.env"), DenyBadPath},
		{"absolute path", commit("/etc/passwd"), DenyBadPath},
		{"class 4 above lease", Request{Class: ClassIrreversible, Kind: "git_commit", Target: "authoritative_repo", Path: "lib/a"}, DenyClass},
		{"unknown target", Request{Class: ClassAuthoritative, Kind: "git_commit", Target: "other_repo", Path: "lib/a"}, DenyNoGrant},
		{"wrong kind", Request{Class: ClassAuthoritative, Kind: "git_remote", Target: "authoritative_repo"}, DenyNoGrant},
		{"class above grant", Request{Class: ClassAuthoritative, Kind: "http_read", Target: "docs_read"}, DenyNoGrant},
		{"http read", Request{Class: ClassObservable, Kind: "http_read", Target: "docs_read", Bytes: 10}, Allowed},
		{"brokered without target", Request{Class: ClassObservable}, DenyNoGrant},
		{"local write in scope", Request{Class: ClassIsolated, Path: "lib/x.ex"}, Allowed},
		{"local forbidden write", Request{Class: ClassIsolated, Path: ".env"}, DenyPathForbidden},
		{"over per-effect bytes", Request{Class: ClassObservable, Kind: "http_read", Target: "docs_read", Bytes: 512<<10 + 1}, DenyBytes},
		{"over total bytes", Request{Class: ClassObservable, Kind: "http_read", Target: "docs_read", Bytes: 10, Spent: 8<<20 - 5}, DenyBytes},
		{"negative bytes", Request{Class: ClassObservable, Kind: "http_read", Target: "docs_read", Bytes: -1}, DenyBytes},
		{"rate exhausted", Request{Class: ClassObservable, Kind: "http_read", Target: "docs_read", RecentEffects: 10}, DenyRate},
		{"last effect of the minute", Request{Class: ClassObservable, Kind: "http_read", Target: "docs_read", RecentEffects: 9}, Allowed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := lease.Check(&c.req); got != c.want {
				t.Fatalf("Check = %v, want %v", got, c.want)
			}
		})
	}
}

func TestZeroCapabilityAllowsNothing(t *testing.T) {
	var zero Capability
	for _, r := range []Request{{}, {Class: ClassIsolated, Path: "a"}, {Class: ClassObservable, Kind: "k", Target: "t"}} {
		if got := zero.Check(&r); got != DenyNoLease {
			t.Errorf("zero capability: %v", got)
		}
	}
	lease := seedLease(t, MaxClass)
	if Intersect(lease, Capability{}).Valid() || Intersect().Valid() || Effective(Capability{}, Verdict{}).Valid() {
		t.Fatal("intersection with nothing allowed something")
	}
}

func TestEmptyAllowAllowsNoPath(t *testing.T) {
	c := MustCompile(Spec{MaxClass: ClassIsolated})
	if got := c.Check(&Request{Class: ClassIsolated, Path: "a"}); got != DenyPathNotAllowed {
		t.Fatalf("empty allow list: %v", got)
	}
}

func TestMintCeiling(t *testing.T) {
	for ceiling := ClassLocal; ceiling <= MaxClass; ceiling++ {
		lease := seedLease(t, ceiling)
		r := Request{Class: ClassAuthoritative, Kind: "git_commit", Target: "authoritative_repo", Path: "lib/a"}
		want := Allowed
		if ceiling < ClassAuthoritative {
			want = DenyClass
		}
		if got := lease.Check(&r); got != want {
			t.Errorf("ceiling %d: %v, want %v", ceiling, got, want)
		}
		if d := lease.Describe(); d.MaxClass > ceiling || (ceiling < ClassObservable && len(d.Grants) != 0) {
			t.Errorf("ceiling %d: lease %+v", ceiling, d)
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	cases := map[string]Spec{
		"class above 4":        {MaxClass: 5},
		"grant of local class": {MaxClass: 3, Grants: []Grant{{Target: "t", Kind: "k", MaxClass: 1}}},
		"grant class above 4":  {MaxClass: 3, Grants: []Grant{{Target: "t", Kind: "k", MaxClass: 7}}},
		"bad target":           {MaxClass: 3, Grants: []Grant{{Target: "../x", Kind: "k", MaxClass: 3}}},
		"empty kind":           {MaxClass: 3, Grants: []Grant{{Target: "t", MaxClass: 3}}},
		"duplicate grant":      {MaxClass: 3, Grants: []Grant{{Target: "t", Kind: "k", MaxClass: 3}, {Target: "t", Kind: "k", MaxClass: 2}}},
		"bad allow glob":       {Allow: []string{"/etc/**"}},
		"bad forbid glob":      {Forbid: []string{"a/[x"}},
		"negative budget":      {Budget: Budget{BytesTotal: -1}},
		"huge budget":          {Budget: Budget{EffectsPerMinute: MaxBudget + 1}},
	}
	for name, s := range cases {
		if _, err := Compile(s); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
}

func TestDescribe(t *testing.T) {
	d := seedLease(t, MaxClass).Describe()
	defaults := 0
	for _, globs := range DefaultForbids() {
		defaults += len(globs)
	}
	// The five of policy and envelope, and the default rules once.
	if len(d.Allow) != 2 || d.Allow[0][0] != "lib/**" || d.Allow[1][0] != "**" || len(d.Forbid) != 5+defaults || d.Budget.BytesPerEffect != 512<<10 || d.Budget.EffectsPerMinute != 10 {
		t.Fatalf("describe: %+v", d)
	}
	self := seedLease(t, MaxClass)
	if got := Intersect(self, self).Describe(); len(got.Allow) != 2 || len(got.Forbid) != 5+defaults {
		t.Fatalf("self-intersection grew: %+v", got)
	}
}

func TestCheckDoesNotAllocate(t *testing.T) {
	lease := seedLease(t, MaxClass)
	reqs := []Request{
		{Class: ClassAuthoritative, Kind: "git_commit", Target: "authoritative_repo", Path: "lib/auth/token.ex", Bytes: 1000},
		{Class: ClassAuthoritative, Kind: "git_commit", Target: "authoritative_repo", Path: "lib/keys/a_secret.pem"},
		{Class: ClassIsolated, Path: "lib/[weird]/x?.ex"},
	}
	for _, r := range reqs {
		if n := testing.AllocsPerRun(100, func() { lease.Check(&r) }); n != 0 {
			t.Errorf("%+v: %v allocs", r, n)
		}
	}
}

func BenchmarkCapabilityCheck(b *testing.B) {
	lease := seedLease(b, MaxClass)
	r := Request{Class: ClassAuthoritative, Kind: "git_commit", Target: "authoritative_repo", Path: "lib/auth/token.ex", Bytes: 1000, Spent: 4096, RecentEffects: 2}
	b.ReportAllocs()
	for b.Loop() {
		if lease.Check(&r) != Allowed {
			b.Fatal("denied")
		}
	}
}

func BenchmarkCapabilityCheckDenied(b *testing.B) {
	lease := seedLease(b, MaxClass)
	r := Request{Class: ClassAuthoritative, Kind: "git_commit", Target: "authoritative_repo", Path: "lib/keys/deploy_secret.pem", Bytes: 1000}
	b.ReportAllocs()
	for b.Loop() {
		if lease.Check(&r) != DenyPathForbidden {
			b.Fatal("allowed")
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	signals := []Signal{
		{Source: SourceSemantic, Action: Narrow, Ceiling: ClassObservable, Code: "scope_drift"},
		{Source: SourcePolicy, Grant: true},
		{Source: SourceInvariant, Action: Throttle},
		{Source: SourceHuman, Grant: true},
	}
	b.ReportAllocs()
	for b.Loop() {
		Decide(signals)
	}
}
