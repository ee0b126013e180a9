package homeostat

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one sample of a trajectory and the regime expected after it.
type step struct {
	at          time.Duration
	drift       float64
	uncertainty float64
	pressure    float64
	denial      Denial
	want        Regime
}

func run(t *testing.T, cfg Config, steps []step) *Homeostat {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		st, err := h.Observe(Sample{At: t0.Add(s.at), Drift: s.drift, Uncertainty: s.uncertainty, Pressure: s.pressure, Denial: s.denial})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if st.Regime != s.want {
			t.Fatalf("step %d (%+v): regime %v (score %.3f), want %v", i, s, st.Regime, st.Score, s.want)
		}
	}
	return h
}

// unsmoothed makes the regime a direct function of the last sample, so a
// trajectory table reads as thresholds and hysteresis only.
func unsmoothed() Config {
	return Config{Alpha: 1, Enter: [4]float64{0.3, 0.5, 0.7, 0.9}, Hysteresis: 0.1, MinDwell: 2 * time.Second}
}

func TestTrajectories(t *testing.T) {
	s := time.Second
	cases := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"up through every regime and back down", unsmoothed(), []step{
			{at: 0, drift: 0.1, want: Stable},
			{at: 1 * s, drift: 0.1, uncertainty: 0.35, want: Uncertain},
			{at: 2 * s, drift: 0.1, uncertainty: 0.55, want: Drifting},
			{at: 3 * s, drift: 0.1, pressure: 0.75, want: Unstable},
			{at: 4 * s, drift: 0.1, pressure: 0.65, want: Unstable},     // inside the hysteresis band
			{at: 4*s + s/2, drift: 0.1, pressure: 0.55, want: Unstable}, // below the band, dwell not served
			{at: 5 * s, drift: 0.1, pressure: 0.55, want: Drifting},     // 2s in unstable: one step down
			{at: 6 * s, drift: 0.1, want: Drifting},                     // one step at a time, dwell again
			{at: 7 * s, drift: 0.1, want: Uncertain},
			{at: 8 * s, drift: 0.1, want: Uncertain},
			{at: 9 * s, drift: 0.1, want: Stable},
		}},
		{"a jump skips regimes upwards", unsmoothed(), []step{
			{at: 0, drift: 0, want: Stable},
			{at: 1 * s, drift: 0, uncertainty: 0.8, want: Unstable},
		}},
		{"sustained score reaches containment, which is final", unsmoothed(), []step{
			{at: 0, uncertainty: 0.95, want: Containment},
			{at: 10 * s, want: Containment},
			{at: 100 * s, want: Containment},
		}},
		{"hysteresis holds the regime at its threshold", unsmoothed(), []step{
			{at: 0, drift: 0.5, want: Drifting},
			{at: 10 * s, drift: 0.45, want: Drifting},
			{at: 20 * s, drift: 0.41, want: Drifting},
			{at: 30 * s, drift: 0.39, want: Uncertain},
		}},
		{"volatility: drift that swings escalates though its mean is moderate", Config{Alpha: 0.5, Enter: [4]float64{0.3, 0.5, 0.7, 0.9}, Hysteresis: 0.1, MinDwell: 0}, []step{
			{at: 0, drift: 0, want: Stable},
			{at: 1 * s, drift: 0.6, want: Uncertain}, // volatility 0.3, drift 0.3
			{at: 2 * s, drift: 0, want: Uncertain},   // volatility 0.45, drift 0.15
			{at: 3 * s, drift: 0.6, want: Drifting},  // volatility 0.525, drift 0.375
			{at: 4 * s, drift: 0, want: Drifting},    // volatility 0.5625, drift 0.1875
			{at: 5 * s, drift: 0.1, want: Uncertain}, // volatility 0.33
			{at: 6 * s, drift: 0.1, want: Stable},    // volatility 0.17: drift has stopped moving
		}},
		{"smoothing damps a single spike", Config{Alpha: 0.25, Enter: [4]float64{0.3, 0.5, 0.7, 0.9}, Hysteresis: 0.1, MinDwell: 0}, []step{
			{at: 0, drift: 0, want: Stable},
			{at: 1 * s, uncertainty: 1, want: Stable}, // 0.25
			{at: 2 * s, want: Stable},                 // 0.1875
			{at: 3 * s, want: Stable},
		}},
		{"smoothing follows a sustained rise and fall", Config{Alpha: 0.5, Enter: [4]float64{0.3, 0.5, 0.7, 0.9}, Hysteresis: 0.1, MinDwell: 0}, []step{
			{at: 0, pressure: 0.8, want: Uncertain},    // 0.4
			{at: 1 * s, pressure: 0.8, want: Drifting}, // 0.6
			{at: 2 * s, pressure: 0.8, want: Unstable}, // 0.7
			{at: 3 * s, pressure: 0.8, want: Unstable}, // 0.75
			{at: 4 * s, pressure: 0, want: Drifting},   // 0.375 < 0.6: one step
			{at: 5 * s, pressure: 0, want: Uncertain},  // 0.1875 < 0.4
			{at: 6 * s, pressure: 0, want: Stable},     // 0.09 < 0.2
		}},
		{"seccomp violation contains at once", unsmoothed(), []step{
			{at: 0, want: Stable},
			{at: 1 * s, denial: SeccompViolation, want: Containment},
			{at: 2 * s, want: Containment},
		}},
		{"forbidden-path write contains even from calm, smoothed state", Config{Alpha: 0.01, Enter: [4]float64{0.3, 0.5, 0.7, 0.9}, Hysteresis: 0.1, MinDwell: time.Hour}, []step{
			{at: 0, want: Stable},
			{at: 1 * s, denial: ForbiddenPathWrite, want: Containment},
		}},
		{"bad readings count as the worst", unsmoothed(), []step{
			{at: 0, drift: math.NaN(), want: Containment},
		}},
		{"negative and infinite readings are clamped", unsmoothed(), []step{
			{at: 0, drift: -5, pressure: -1, want: Stable},
			{at: 1 * s, uncertainty: math.Inf(-1), want: Containment},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { run(t, c.cfg, c.steps) })
	}
}

func TestContainmentRecordsDenialAndVersions(t *testing.T) {
	h := run(t, unsmoothed(), []step{
		{at: 0, uncertainty: 0.35, want: Uncertain},
		{at: time.Second, denial: SeccompViolation, want: Containment},
		{at: 2 * time.Second, denial: ForbiddenPathWrite, want: Containment},
	})
	st := h.State()
	if st.Denial != SeccompViolation || st.Version != 2 || !st.Since.Equal(t0.Add(time.Second)) {
		t.Fatalf("state %+v", st)
	}
	h.Reset(t0.Add(time.Minute))
	if st := h.State(); st.Regime != Stable || st.Version != 3 || st.Denial != NoDenial || st.Score != 0 {
		t.Fatalf("after reset %+v", st)
	}
	if _, err := h.Observe(Sample{At: t0.Add(30 * time.Second)}); !errors.Is(err, ErrTimeWentBack) {
		t.Fatalf("sample before the reset: %v", err)
	}
}

func TestTimeMustNotGoBack(t *testing.T) {
	h, _ := New(unsmoothed())
	if _, err := h.Observe(Sample{At: t0.Add(time.Minute), Uncertainty: 0.35}); err != nil {
		t.Fatal(err)
	}
	before := h.State()
	if _, err := h.Observe(Sample{At: t0, Denial: SeccompViolation}); !errors.Is(err, ErrTimeWentBack) {
		t.Fatalf("got %v", err)
	}
	if h.State() != before {
		t.Fatal("a refused sample changed the state")
	}
	// The same instant is not "back".
	if _, err := h.Observe(Sample{At: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
}

func TestDeterministic(t *testing.T) {
	samples := make([]Sample, 500)
	x := uint64(12345)
	next := func() float64 { x = x*6364136223846793005 + 1442695040888963407; return float64(x>>11) / (1 << 53) }
	for i := range samples {
		samples[i] = Sample{At: t0.Add(time.Duration(i) * 300 * time.Millisecond), Drift: next() * 0.6, Uncertainty: next() * 0.5, Pressure: next() * 0.7}
	}
	replay := func() []State {
		h, _ := New(DefaultConfig())
		out := make([]State, len(samples))
		for i, s := range samples {
			out[i], _ = h.Observe(s)
		}
		return out
	}
	a, b := replay(), replay()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("sample %d: %+v vs %+v", i, a[i], b[i])
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"alpha 0":               func(c *Config) { c.Alpha = 0 },
		"alpha NaN":             func(c *Config) { c.Alpha = math.NaN() },
		"thresholds not rising": func(c *Config) { c.Enter[2] = c.Enter[1] },
		"threshold above 1":     func(c *Config) { c.Enter[3] = 1.5 },
		"hysteresis too large":  func(c *Config) { c.Hysteresis = 0.3 },
		"negative hysteresis":   func(c *Config) { c.Hysteresis = -0.1 },
		"negative dwell":        func(c *Config) { c.MinDwell = -time.Second },
		"zero first threshold":  func(c *Config) { c.Enter[0] = 0 },
	} {
		c := DefaultConfig()
		mut(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRegimeSignals(t *testing.T) {
	prev := authority.Continue
	for r := Stable; r <= Containment; r++ {
		s := r.Signal()
		if s.Source != authority.SourceInvariant || s.Action < prev {
			t.Fatalf("%v: %+v", r, s)
		}
		prev = s.Action
		v := authority.Decide([]authority.Signal{s})
		if v.Ceiling > r.MaxClass() {
			t.Fatalf("%v: verdict ceiling %d above the regime's %d", r, v.Ceiling, r.MaxClass())
		}
	}
}
