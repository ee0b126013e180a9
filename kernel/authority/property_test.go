package authority

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The property tests draw from a small universe so random specs, signals
// and requests collide often enough to exercise every branch. Seeds are
// fixed: a failure reproduces exactly.

var (
	uTargets = []string{"repo", "docs", "api"}
	uKinds   = []string{"git_commit", "http_read"}
	uGlobs   = []string{"**", "lib/**", "src/*.go", "docs/**/*.md", "**/*secret*", "lib/auth/*", ".env", "test/**", "**/.git/**", "*"}
	uPaths   = []string{"", "lib/auth/token.ex", "lib/a/b/c.go", "src/main.go", "docs/x/y.md", ".env", "test/auth_test.exs",
		"lib/secret_key.pem", "README.md", "lib/../.env", "/etc/passwd", "lib/.git/config", "src/a/b.go"}
)

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func randSpec(r *rand.Rand) Spec {
	s := Spec{MaxClass: Class(r.IntN(5))}
	for _, t := range uTargets {
		for _, k := range uKinds {
			if r.IntN(2) == 0 {
				s.Grants = append(s.Grants, Grant{Target: t, Kind: k, MaxClass: Class(2 + r.IntN(3))})
			}
		}
	}
	for i := r.IntN(4); i > 0; i-- {
		s.Allow = append(s.Allow, pick(r, uGlobs))
	}
	for i := r.IntN(3); i > 0; i-- {
		s.Forbid = append(s.Forbid, pick(r, uGlobs))
	}
	s.Budget = Budget{BytesPerEffect: r.Int64N(2000), BytesTotal: r.Int64N(5000), EffectsPerMinute: r.Int64N(10)}
	return s
}

func randCap(t *testing.T, r *rand.Rand) Capability {
	c, err := Compile(randSpec(r))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func randRequest(r *rand.Rand) Request {
	return Request{
		Class: Class(r.IntN(5)), Target: pick(r, uTargets), Kind: pick(r, uKinds), Path: pick(r, uPaths),
		Bytes: r.Int64N(2500) - 10, Spent: r.Int64N(6000), RecentEffects: r.Int64N(12),
	}
}

// within checks, by sampling, that every request a allows b allows too.
func within(t *testing.T, r *rand.Rand, a, b Capability, what string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		req := randRequest(r)
		if a.Check(&req) == Allowed && b.Check(&req) != Allowed {
			t.Fatalf("%s: %+v allowed by the result (%+v) but not by its input (%+v)", what, req, a.Describe(), b.Describe())
		}
	}
}

func TestIntersectionIsNeverWider(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 3))
	for i := 0; i < 500; i++ {
		a, b, c := randCap(t, r), randCap(t, r), randCap(t, r)
		ab := Intersect(a, b)
		within(t, r, ab, a, "a∩b ⊆ a")
		within(t, r, ab, b, "a∩b ⊆ b")
		abc := Intersect(ab, c)
		within(t, r, abc, ab, "(a∩b)∩c ⊆ a∩b")
		ceiling := Class(r.IntN(5))
		lease := Mint(a, b, ceiling)
		within(t, r, lease, a, "lease ⊆ policy")
		within(t, r, lease, b, "lease ⊆ envelope")
		if lease.MaxClass() > ceiling {
			t.Fatalf("lease class %d above ceiling %d", lease.MaxClass(), ceiling)
		}
		// The class and budget bounds are exact, not only sampled.
		d, da, db := lease.Describe(), a.Describe(), b.Describe()
		if d.MaxClass > min(da.MaxClass, db.MaxClass) || d.Budget.BytesTotal > min(da.Budget.BytesTotal, db.Budget.BytesTotal) ||
			d.Budget.BytesPerEffect > min(da.Budget.BytesPerEffect, db.Budget.BytesPerEffect) ||
			d.Budget.EffectsPerMinute > min(da.Budget.EffectsPerMinute, db.Budget.EffectsPerMinute) {
			t.Fatalf("lease %+v wider than %+v or %+v", d, da, db)
		}
		for _, g := range d.Grants {
			if !slices.ContainsFunc(da.Grants, func(x Grant) bool { return x.Target == g.Target && x.Kind == g.Kind && x.MaxClass >= g.MaxClass }) ||
				!slices.ContainsFunc(db.Grants, func(x Grant) bool { return x.Target == g.Target && x.Kind == g.Kind && x.MaxClass >= g.MaxClass }) {
				t.Fatalf("lease grant %+v is not in both inputs", g)
			}
		}
	}
}

var (
	allSources = []Source{SourceSemantic, SourceHuman, SourcePolicy, SourceInvariant, SourceCapability, SourceKernel}
	allActions = []Action{Continue, Throttle, Narrow, Revoke, Interrupt, Contain}
)

func randSignal(r *rand.Rand) Signal {
	s := Signal{Source: pick(r, allSources), Action: pick(r, allActions), Ceiling: Class(r.IntN(5)), Grant: r.IntN(3) == 0}
	if r.IntN(50) == 0 { // now and then, a malformed one
		s.Source = Source(r.IntN(10))
		s.Action = Action(r.IntN(9))
	}
	return s
}

func randSignals(r *rand.Rand, n int) []Signal {
	out := make([]Signal, n)
	for i := range out {
		out[i] = randSignal(r)
	}
	return out
}

// TestLowerNeverCancelsHigher: adding a signal of lower precedence than
// the one that decided a negative verdict never makes the verdict less
// severe, never raises the ceiling and never produces a grant.
func TestLowerNeverCancelsHigher(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 7))
	for i := 0; i < 20000; i++ {
		set := randSignals(r, r.IntN(6))
		v := Decide(set)
		extra := randSignal(r)
		if v.Action != Continue && extra.Source >= v.Decider.Source {
			extra.Source = pick(r, allSources[:max(1, int(v.Decider.Source)-1)])
		}
		w := Decide(append(slices.Clone(set), extra))
		if w.Action < v.Action || w.Ceiling > v.Ceiling {
			t.Fatalf("%+v + %+v: %v/%d became %v/%d", set, extra, v.Action, v.Ceiling, w.Action, w.Ceiling)
		}
		if v.Action != Continue && w.Granted {
			t.Fatalf("%+v + %+v: a lower signal turned %v into a grant", set, extra, v.Action)
		}
		if v.Action != Continue && w.Invalid == v.Invalid && w.Decider.Source < v.Decider.Source && w.Action == v.Action {
			t.Fatalf("%+v + %+v: decider fell from %v to %v", set, extra, v.Decider.Source, w.Decider.Source)
		}
	}
}

// TestDecideIsMonotone: no signal at all makes a verdict less severe, and
// only a Policy or Human grant can create a grant.
func TestDecideIsMonotone(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 9))
	for i := 0; i < 20000; i++ {
		set := randSignals(r, r.IntN(6))
		extra := randSignal(r)
		v, w := Decide(set), Decide(append(slices.Clone(set), extra))
		if w.Action < v.Action || w.Ceiling > v.Ceiling {
			t.Fatalf("%+v + %+v weakened the verdict", set, extra)
		}
		if w.Granted && !v.Granted && !(extra.Grant && (extra.Source == SourcePolicy || extra.Source == SourceHuman)) {
			t.Fatalf("%+v + %+v created a grant", set, extra)
		}
	}
}

func TestDecideIgnoresOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 5000; i++ {
		set := randSignals(r, r.IntN(8))
		v := Decide(set)
		r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
		w := Decide(set)
		if v.Action != w.Action || v.Ceiling != w.Ceiling || v.Granted != w.Granted || v.Invalid != w.Invalid {
			t.Fatalf("order changed the verdict: %+v vs %+v", v, w)
		}
	}
}

// TestSemanticNeverWidens: whatever semantic signals are added, the
// effective lease is within the one without them, and within the minted
// lease; semantic signals alone never grant.
func TestSemanticNeverWidens(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for i := 0; i < 1000; i++ {
		lease := Mint(randCap(t, r), randCap(t, r), Class(r.IntN(5)))
		set := randSignals(r, r.IntN(4))
		base := Effective(lease, Decide(set))
		withSem := slices.Clone(set)
		for j := r.IntN(4) + 1; j > 0; j-- {
			s := randSignal(r)
			s.Source = SourceSemantic
			withSem = append(withSem, s)
		}
		v := Decide(withSem)
		eff := Effective(lease, v)
		within(t, r, eff, base, "semantic input widened the effective lease")
		within(t, r, eff, lease, "effective lease wider than the lease")
		if v.Granted && !Decide(set).Granted {
			t.Fatalf("semantic signals granted: %+v", withSem)
		}
		if onlySem := Decide(withSem[len(set):]); onlySem.Granted || onlySem.Invalid == 0 && onlySem.Action > Interrupt {
			t.Fatalf("semantic-only verdict %+v", onlySem)
		}
	}
}

func TestDecideTable(t *testing.T) {
	cases := []struct {
		name    string
		signals []Signal
		action  Action
		ceiling Class
		granted bool
		decider Source
	}{
		{"nothing", nil, Continue, MaxClass, false, SourceInvalid},
		{"policy grant", []Signal{{Source: SourcePolicy, Grant: true}}, Continue, MaxClass, true, SourcePolicy},
		{"semantic grant is ignored", []Signal{{Source: SourceSemantic, Grant: true}}, Continue, MaxClass, false, SourceInvalid},
		{"kernel grant is ignored", []Signal{{Source: SourceKernel, Grant: true}}, Continue, MaxClass, false, SourceInvalid},
		{"human grant vs semantic narrow", []Signal{{Source: SourceHuman, Grant: true}, {Source: SourceSemantic, Action: Narrow, Ceiling: 2}}, Narrow, 2, false, SourceSemantic},
		{"policy grant vs capability violation", []Signal{{Source: SourcePolicy, Grant: true}, {Source: SourceCapability, Action: Revoke}}, Revoke, ClassLocal, false, SourceCapability},
		{"kernel denial always contains", []Signal{{Source: SourceKernel, Action: Throttle}}, Contain, ClassLocal, false, SourceKernel},
		{"semantic cannot contain", []Signal{{Source: SourceSemantic, Action: Contain}}, Interrupt, ClassLocal, false, SourceSemantic},
		{"tie goes to the higher source", []Signal{{Source: SourceSemantic, Action: Interrupt}, {Source: SourceInvariant, Action: Interrupt}, {Source: SourceHuman, Action: Interrupt}}, Interrupt, ClassLocal, false, SourceInvariant},
		{"lowest ceiling wins", []Signal{{Source: SourcePolicy, Action: Narrow, Ceiling: 3}, {Source: SourceSemantic, Action: Narrow, Ceiling: 1}}, Narrow, 1, false, SourcePolicy},
		{"malformed signal contains", []Signal{{Source: 99, Action: Continue}}, Contain, ClassLocal, false, 99},
		{"unknown action contains", []Signal{{Source: SourceHuman, Action: 42, Grant: true}}, Contain, ClassLocal, false, SourceHuman},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.signals)
			if v.Action != c.action || v.Ceiling != c.ceiling || v.Granted != c.granted || v.Decider.Source != c.decider {
				t.Fatalf("got %+v", v)
			}
		})
	}
}

func TestEffective(t *testing.T) {
	lease := seedLease(t, MaxClass)
	commit := Request{Class: ClassAuthoritative, Kind: "git_commit", Target: "authoritative_repo", Path: "lib/a.ex"}
	read := Request{Class: ClassObservable, Kind: "http_read", Target: "docs_read", RecentEffects: 5}
	cases := []struct {
		name         string
		v            Verdict
		commit, read Reason
	}{
		{"continue", Decide(nil), Allowed, Allowed},
		{"throttle halves the rate", Decide([]Signal{{Source: SourceInvariant, Action: Throttle}}), Allowed, DenyRate},
		{"narrow to 2", Decide([]Signal{{Source: SourceSemantic, Action: Narrow, Ceiling: 2}}), DenyClass, Allowed},
		{"revoke", Decide([]Signal{{Source: SourceHuman, Action: Revoke}}), DenyNoLease, DenyNoLease},
		{"interrupt", Decide([]Signal{{Source: SourceSemantic, Action: Interrupt}}), DenyNoLease, DenyNoLease},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := Effective(lease, c.v)
			if got := e.Check(&commit); got != c.commit {
				t.Errorf("commit: %v, want %v", got, c.commit)
			}
			if got := e.Check(&read); got != c.read {
				t.Errorf("read: %v, want %v", got, c.read)
			}
		})
	}
}
