package regulator

import (
	"fmt"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
)

// Level is the kernel's autonomy, in increasing order.
type Level uint8

const (
	Observe Level = iota // work inside the domain only (classes 0-1)
	Advise               // plus brokered observable effects (class 2); mutations wait
	Act                  // the lease decides, up to class 4
)

func (l Level) String() string {
	switch l {
	case Observe:
		return "observe"
	case Advise:
		return "advise"
	case Act:
		return "act"
	}
	return "invalid"
}

// ParseLevel reads a level's name (as String writes it).
func ParseLevel(s string) (Level, bool) {
	for l := Observe; l <= Act; l++ {
		if l.String() == s {
			return l, true
		}
	}
	return 0, false
}

// MaxClass is the class ceiling the level puts on every lease minted or
// checked under it (authority.Mint's ceiling).
func (l Level) MaxClass() authority.Class {
	switch l {
	case Act:
		return authority.ClassIrreversible
	case Advise:
		return authority.ClassObservable
	}
	return authority.ClassIsolated
}

// Signal is the level as a Deterministic Invariant for authority.Decide.
func (l Level) Signal() authority.Signal {
	s := authority.Signal{Source: authority.SourceInvariant, Code: "regulator:" + l.String()}
	if l != Act {
		s.Action, s.Ceiling = authority.Narrow, l.MaxClass()
	}
	return s
}

// Fault is a set of degradations observed together.
type Fault uint8

const (
	SemanticOutage   Fault = 1 << iota // the sensor endpoint failed, timed out or answered garbage
	UnpinnedModel                      // the endpoint answered as a model outside the pinned set
	DatabaseLoss                       // the authority store is unreachable
	BrokerSaturation                   // the effect broker is refusing work as saturated
	knownFaults      = SemanticOutage | UnpinnedModel | DatabaseLoss | BrokerSaturation
)

func (f Fault) String() string {
	if f == 0 {
		return "healthy"
	}
	var parts []string
	for _, n := range []struct {
		f    Fault
		name string
	}{{SemanticOutage, "semantic_outage"}, {UnpinnedModel, "unpinned_model"}, {DatabaseLoss, "database_loss"}, {BrokerSaturation, "broker_saturation"}} {
		if f&n.f != 0 {
			parts = append(parts, n.name)
		}
	}
	if f&^knownFaults != 0 {
		parts = append(parts, "unknown")
	}
	return strings.Join(parts, "+")
}

// Cap is the highest level f allows. The table is fixed in code: which
// degradation forbids which authority is a security decision, not a knob.
func (f Fault) Cap() Level {
	switch {
	case f&^knownFaults != 0, f&DatabaseLoss != 0:
		return Observe
	case f&(SemanticOutage|UnpinnedModel|BrokerSaturation) != 0:
		return Advise
	}
	return Act
}

// Health is one observation of what autonomy depends on.
type Health struct {
	At     time.Time
	Faults Fault
}

// Config tunes the regulator.
type Config struct {
	Start        Level         // level before any observation
	Max          Level         // highest level ever granted
	RecoverAfter int           // consecutive healthy observations per step up, ≥ 1
	RecoverFor   time.Duration // and the span they must cover, ≥ 0
}

// DefaultConfig starts at observe and needs five healthy observations over
// at least five seconds per step up.
func DefaultConfig() Config {
	return Config{Start: Observe, Max: Act, RecoverAfter: 5, RecoverFor: 5 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Max > Act:
		return fmt.Errorf("max level %d is not a level", c.Max)
	case c.Start > c.Max:
		return fmt.Errorf("start level %v above max %v", c.Start, c.Max)
	case c.RecoverAfter < 1:
		return fmt.Errorf("recover_after %d < 1", c.RecoverAfter)
	case c.RecoverFor < 0:
		return fmt.Errorf("negative recover_for")
	}
	return nil
}

// State is the regulator's reading.
type State struct {
	Level  Level
	Faults Fault // of the last observation
	// Streak counts consecutive observations whose cap is above Level;
	// StreakSince is when the streak began.
	Streak      int
	StreakSince time.Time
	// Version counts level changes.
	Version uint64
	Since   time.Time // when Level was entered
}

// Regulator holds the autonomy level.
type Regulator struct {
	cfg  Config
	st   State
	last time.Time
	seen bool
}

// Error is a refused observation; a constant type, so it cannot be
// reassigned and errors.Is works.
type Error string

func (e Error) Error() string { return "regulator: " + string(e) }

// ErrTimeWentBack: an observation older than the previous one. It changes
// nothing.
const ErrTimeWentBack Error = "observation is older than the previous one"

// New returns a regulator at cfg.Start.
func New(cfg Config) (*Regulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Regulator{cfg: cfg, st: State{Level: cfg.Start}}, nil
}

// State returns the current state.
func (r *Regulator) State() State { return r.st }

// Level returns the current level.
func (r *Regulator) Level() Level { return r.st.Level }

// Observe folds one health observation in and returns the new state.
func (r *Regulator) Observe(h Health) (State, error) {
	if r.seen && h.At.Before(r.last) {
		return r.st, ErrTimeWentBack
	}
	if !r.seen {
		r.st.Since = h.At
	}
	r.seen, r.last = true, h.At
	st := &r.st
	st.Faults = h.Faults
	limit := min(h.Faults.Cap(), r.cfg.Max)
	switch {
	case limit < st.Level:
		// Contraction is immediate.
		r.set(limit, h.At)
	case limit > st.Level:
		if st.Streak == 0 {
			st.StreakSince = h.At
		}
		st.Streak++
		if st.Streak >= r.cfg.RecoverAfter && h.At.Sub(st.StreakSince) >= r.cfg.RecoverFor {
			r.set(st.Level+1, h.At) // one step; the next needs its own streak
		}
	default:
		st.Streak = 0
	}
	return r.st, nil
}

func (r *Regulator) set(l Level, at time.Time) {
	r.st.Level, r.st.Since = l, at
	r.st.Streak, r.st.StreakSince = 0, time.Time{}
	r.st.Version++
}
