package regulator

import (
	"errors"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type obs struct {
	at     time.Duration
	faults Fault
	want   Level
}

func walk(t *testing.T, cfg Config, steps []obs) *Regulator {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range steps {
		st, err := r.Observe(Health{At: t0.Add(o.at), Faults: o.faults})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if st.Level != o.want {
			t.Fatalf("step %d (%v at %v): level %v, want %v (streak %d)", i, o.faults, o.at, st.Level, o.want, st.Streak)
		}
	}
	return r
}

func TestRegulator(t *testing.T) {
	s := time.Second
	quick := Config{Start: Act, Max: Act, RecoverAfter: 3, RecoverFor: 0}
	cases := []struct {
		name  string
		cfg   Config
		steps []obs
	}{
		{"healthy stays at act", quick, []obs{{0, 0, Act}, {s, 0, Act}}},
		{"semantic outage drops to advise at once", quick, []obs{{0, 0, Act}, {s, SemanticOutage, Advise}}},
		{"unpinned model drops to advise", quick, []obs{{0, UnpinnedModel, Advise}}},
		{"broker saturation drops to advise", quick, []obs{{0, BrokerSaturation, Advise}}},
		{"database loss drops to observe", quick, []obs{{0, DatabaseLoss, Observe}}},
		{"the worst fault decides", quick, []obs{{0, SemanticOutage | DatabaseLoss, Observe}}},
		{"an unknown fault counts as the worst", quick, []obs{{0, 1 << 7, Observe}}},
		{"recovery needs N consecutive healthy observations", quick, []obs{
			{0, SemanticOutage, Advise},
			{1 * s, 0, Advise}, {2 * s, 0, Advise}, {3 * s, 0, Act},
		}},
		{"a fault restarts the count", quick, []obs{
			{0, SemanticOutage, Advise},
			{1 * s, 0, Advise}, {2 * s, 0, Advise},
			{3 * s, BrokerSaturation, Advise}, // cap == level: streak reset
			{4 * s, 0, Advise}, {5 * s, 0, Advise}, {6 * s, 0, Act},
		}},
		{"recovery is one level at a time", quick, []obs{
			{0, DatabaseLoss, Observe},
			{1 * s, 0, Observe}, {2 * s, 0, Observe}, {3 * s, 0, Advise},
			{4 * s, 0, Advise}, {5 * s, 0, Advise}, {6 * s, 0, Act},
		}},
		{"partial recovery stops at the remaining fault's cap", quick, []obs{
			{0, DatabaseLoss | SemanticOutage, Observe},
			{1 * s, SemanticOutage, Observe}, {2 * s, SemanticOutage, Observe}, {3 * s, SemanticOutage, Advise},
			{4 * s, SemanticOutage, Advise}, {5 * s, SemanticOutage, Advise}, {6 * s, SemanticOutage, Advise},
		}},
		{"recovery also needs the duration", Config{Start: Advise, Max: Act, RecoverAfter: 2, RecoverFor: 10 * s}, []obs{
			{0, 0, Advise}, {1 * s, 0, Advise}, {9 * s, 0, Advise}, {10 * s, 0, Act},
		}},
		{"default starts at observe", DefaultConfig(), []obs{
			{0, 0, Observe}, {1 * s, 0, Observe}, {2 * s, 0, Observe}, {3 * s, 0, Observe}, {4 * s, 0, Observe}, {5 * s, 0, Advise},
		}},
		{"max caps recovery", Config{Start: Observe, Max: Advise, RecoverAfter: 1}, []obs{
			{0, 0, Advise}, {s, 0, Advise}, {2 * s, 0, Advise},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { walk(t, c.cfg, c.steps) })
	}
}

func TestClassCeilings(t *testing.T) {
	want := map[Level]authority.Class{Observe: authority.ClassIsolated, Advise: authority.ClassObservable, Act: authority.ClassIrreversible}
	for l, c := range want {
		if l.MaxClass() != c {
			t.Errorf("%v: class %d, want %d", l, l.MaxClass(), c)
		}
		v := authority.Decide([]authority.Signal{l.Signal()})
		if v.Ceiling != c {
			t.Errorf("%v: verdict ceiling %d, want %d", l, v.Ceiling, c)
		}
	}
	// The class 3 commit of issue 6 §7 semantic_outage_degradation: refused
	// under advise, allowed once health has returned and act is regained.
	lease := func(l Level) authority.Capability {
		spec := authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}}, Allow: []string{"**"},
			Budget: authority.Budget{BytesPerEffect: 10, BytesTotal: 10, EffectsPerMinute: 1}}
		c := authority.MustCompile(spec)
		return authority.Mint(c, c, l.MaxClass())
	}
	req := authority.Request{Class: 3, Kind: "git_commit", Target: "repo", Path: "a"}
	r, _ := New(Config{Start: Act, Max: Act, RecoverAfter: 2})
	r.Observe(Health{At: t0, Faults: SemanticOutage})
	l := lease(r.Level())
	if got := l.Check(&req); got != authority.DenyClass {
		t.Fatalf("class 3 under %v: %v", r.Level(), got)
	}
	r.Observe(Health{At: t0.Add(time.Second)})
	r.Observe(Health{At: t0.Add(2 * time.Second)})
	l = lease(r.Level())
	if got := l.Check(&req); got != authority.Allowed {
		t.Fatalf("class 3 under %v: %v", r.Level(), got)
	}
}

func TestTimeMustNotGoBack(t *testing.T) {
	r, _ := New(Config{Start: Act, Max: Act, RecoverAfter: 1})
	r.Observe(Health{At: t0.Add(time.Minute)})
	before := r.State()
	if _, err := r.Observe(Health{At: t0, Faults: DatabaseLoss}); !errors.Is(err, ErrTimeWentBack) {
		t.Fatalf("got %v", err)
	}
	if r.State() != before {
		t.Fatal("a refused observation changed the state")
	}
}

func TestVersionCountsChanges(t *testing.T) {
	r := walk(t, Config{Start: Act, Max: Act, RecoverAfter: 1}, []obs{
		{0, DatabaseLoss, Observe}, {1, 0, Advise}, {2, 0, Act}, {3, 0, Act},
	})
	if v := r.State().Version; v != 3 {
		t.Fatalf("version %d", v)
	}
}

func TestConfigValidate(t *testing.T) {
	for name, c := range map[string]Config{
		"max not a level": {Max: 9, RecoverAfter: 1},
		"start above max": {Start: Act, Max: Advise, RecoverAfter: 1},
		"no recovery":     {RecoverAfter: 0},
		"negative span":   {RecoverAfter: 1, RecoverFor: -1},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestFaultString(t *testing.T) {
	if s := (SemanticOutage | DatabaseLoss | 1<<6).String(); s != "semantic_outage+database_loss+unknown" {
		t.Fatal(s)
	}
}
