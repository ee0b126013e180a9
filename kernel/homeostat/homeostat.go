package homeostat

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
)

// Regime is where the trajectory is, in increasing severity.
type Regime uint8

const (
	Stable Regime = iota
	Uncertain
	Drifting
	Unstable
	Containment
)

func (r Regime) String() string {
	switch r {
	case Stable:
		return "stable"
	case Uncertain:
		return "uncertain"
	case Drifting:
		return "drifting"
	case Unstable:
		return "unstable"
	case Containment:
		return "containment"
	}
	return "invalid"
}

// MaxClass is the highest effect class the regime still permits (the
// commit horizon's "regime still permits the class").
func (r Regime) MaxClass() authority.Class {
	switch r {
	case Stable:
		return authority.ClassIrreversible
	case Uncertain:
		return authority.ClassAuthoritative
	case Drifting:
		return authority.ClassObservable
	case Unstable:
		return authority.ClassIsolated
	}
	return authority.ClassLocal
}

// Signal is the regime as a Deterministic Invariant for authority.Decide.
func (r Regime) Signal() authority.Signal {
	s := authority.Signal{Source: authority.SourceInvariant, Code: "homeostat:" + r.String()}
	switch r {
	case Stable:
		s.Action = authority.Continue
	case Uncertain, Drifting:
		s.Action, s.Ceiling = authority.Narrow, r.MaxClass()
	case Unstable:
		s.Action = authority.Interrupt
	default:
		s.Action = authority.Contain
	}
	return s
}

// Denial is a kernel denial reported with a sample.
type Denial uint8

const (
	NoDenial           Denial = iota
	SeccompViolation          // the monitor reported a refused syscall
	ForbiddenPathWrite        // a write to a path the lease forbids
	OtherKernelDenial         // any other denial the kernel observed
)

func (d Denial) String() string {
	switch d {
	case NoDenial:
		return "none"
	case SeccompViolation:
		return "seccomp_violation"
	case ForbiddenPathWrite:
		return "forbidden_path_write"
	}
	return "kernel_denial"
}

// Sample is one observation of the trajectory. Drift, Uncertainty and
// Pressure are in [0, 1], 0 the best; volatility is derived from how drift
// moves, so a sensor cannot report it away.
type Sample struct {
	At          time.Time
	Drift       float64
	Uncertainty float64
	Pressure    float64
	Denial      Denial
}

// Config tunes the homeostat. Enter[i] is the smoothed score at which
// regime i+1 (Uncertain … Containment) is entered.
type Config struct {
	Alpha      float64    // EWMA weight of a new sample, in (0, 1]
	Enter      [4]float64 // strictly increasing, in (0, 1]
	Hysteresis float64    // a regime is left below Enter − Hysteresis
	MinDwell   time.Duration
}

// DefaultConfig is a conservative starting point.
func DefaultConfig() Config {
	return Config{Alpha: 0.3, Enter: [4]float64{0.3, 0.5, 0.7, 0.9}, Hysteresis: 0.1, MinDwell: 5 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if !(c.Alpha > 0 && c.Alpha <= 1) {
		return fmt.Errorf("alpha %v outside (0, 1]", c.Alpha)
	}
	prev := 0.0
	for i, e := range c.Enter {
		if !(e > prev && e <= 1) {
			return fmt.Errorf("enter[%d] = %v: thresholds must increase within (0, 1]", i, e)
		}
		prev = e
	}
	if !(c.Hysteresis >= 0 && c.Hysteresis < c.Enter[0]) {
		return fmt.Errorf("hysteresis %v outside [0, enter[0])", c.Hysteresis)
	}
	if c.MinDwell < 0 {
		return errors.New("negative minimum dwell")
	}
	return nil
}

// State is the homeostat's reading after a sample.
type State struct {
	Regime Regime
	// Version counts regime changes: the trajectory_version an effect's
	// version vector records at prepare.
	Version     uint64
	Drift       float64
	Volatility  float64
	Uncertainty float64
	Pressure    float64
	Score       float64 // the worst of the four: no dimension averages another away
	Since       time.Time
	// Denial is the kernel denial that contained the episode, if one did.
	Denial Denial
}

// Homeostat is one episode's trajectory state.
type Homeostat struct {
	cfg       Config
	st        State
	lastDrift float64
	last      time.Time
	seen      bool
}

// Error is a refused sample. It is a constant type, so callers test it
// with errors.Is and nothing can reassign it.
type Error string

func (e Error) Error() string { return "homeostat: " + string(e) }

// ErrTimeWentBack: a sample older than the previous one. It changes nothing.
const ErrTimeWentBack Error = "sample is older than the previous one"

// New returns a homeostat in the stable regime.
func New(cfg Config) (*Homeostat, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Homeostat{cfg: cfg}, nil
}

// State returns the current state.
func (h *Homeostat) State() State { return h.st }

// Observe folds one sample into the state and returns the new state.
func (h *Homeostat) Observe(s Sample) (State, error) {
	if h.seen && s.At.Before(h.last) {
		return h.st, ErrTimeWentBack
	}
	if !h.seen {
		h.st.Since = s.At
	}
	h.seen, h.last = true, s.At
	if h.st.Regime == Containment {
		return h.st, nil
	}
	if s.Denial != NoDenial {
		// No smoothing: one denied syscall is proof, not a trend.
		h.move(Containment, s.At)
		h.st.Denial = s.Denial
		return h.st, nil
	}
	drift, unc, press := clamp(s.Drift), clamp(s.Uncertainty), clamp(s.Pressure)
	a := h.cfg.Alpha
	st := &h.st
	st.Volatility = ewma(st.Volatility, math.Abs(drift-h.lastDrift), a)
	st.Drift = ewma(st.Drift, drift, a)
	st.Uncertainty = ewma(st.Uncertainty, unc, a)
	st.Pressure = ewma(st.Pressure, press, a)
	h.lastDrift = drift
	st.Score = max(st.Drift, st.Volatility, st.Uncertainty, st.Pressure)

	if target := h.regimeFor(st.Score); target > st.Regime {
		h.move(target, s.At)
	} else if st.Regime > Stable &&
		st.Score < h.cfg.Enter[st.Regime-1]-h.cfg.Hysteresis &&
		s.At.Sub(st.Since) >= h.cfg.MinDwell {
		h.move(st.Regime-1, s.At)
	}
	return h.st, nil
}

// Reset returns a contained (or any) homeostat to stable with fresh
// smoothing, as of at. Only repair calls it, after it has restored a
// verified checkpoint into a new generation under a new epoch.
func (h *Homeostat) Reset(at time.Time) {
	version := h.st.Version
	*h = Homeostat{cfg: h.cfg, seen: true, last: at}
	h.st = State{Regime: Stable, Version: version + 1, Since: at}
}

func (h *Homeostat) move(r Regime, at time.Time) {
	h.st.Regime, h.st.Since = r, at
	h.st.Version++
}

func (h *Homeostat) regimeFor(score float64) Regime {
	r := Stable
	for i, e := range h.cfg.Enter {
		if score >= e {
			r = Regime(i + 1)
		}
	}
	return r
}

func ewma(prev, x, alpha float64) float64 { return prev + alpha*(x-prev) }

func clamp(x float64) float64 {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return 1
	case x < 0:
		return 0
	case x > 1:
		return 1
	}
	return x
}
