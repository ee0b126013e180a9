package sensor

import (
	"bytes"
	"context"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
)

// SchemaVersion names the bank and its answer schema. A change to either
// (a sensor added, an answer value added) is a new version: an observation
// is only comparable with observations of the same version.
const SchemaVersion = "autonomic.sensor.v1"

// Name is one sensor of the bank.
type Name string

const (
	ScopeDrift          Name = "scope_drift"
	AuthorityEscalation Name = "authority_escalation"
	EvidenceSufficiency Name = "evidence_sufficiency"
	Irreversibility     Name = "irreversibility"
	TrajectoryRegime    Name = "trajectory_regime"
)

// BankSize is the number of sensors in the bank.
const BankSize = 5

// Bank is the fixed bank, in its fixed order. It returns an array (a
// value), so no caller can change the bank for anyone else.
func Bank() [BankSize]Name {
	return [BankSize]Name{ScopeDrift, AuthorityEscalation, EvidenceSufficiency, Irreversibility, TrajectoryRegime}
}

// Level is a sensor's assessment. The zero value is Degraded: absence of
// an answer is never read as benign.
type Level uint8

const (
	Degraded Level = iota
	Low
	Medium
	High
)

func (l Level) String() string {
	switch l {
	case Low:
		return "low"
	case Medium:
		return "medium"
	case High:
		return "high"
	}
	return "degraded"
}

// Risk maps a level onto [0, 1] for the homeostat and for a policy's
// semantic max_risk. Degraded is the worst: not knowing is not safe.
func (l Level) Risk() float64 {
	switch l {
	case Low:
		return 0.1
	case Medium:
		return 0.5
	case High:
		return 0.9
	}
	return 1
}

// Identity is what produced an observation; it is stored with each one.
type Identity struct {
	Implementation string `json:"implementation"` // "rules" or "openai-chat"
	Model          string `json:"model"`          // the model that answered (as it said), or the rule set
	Schema         string `json:"schema"`         // SchemaVersion
}

// Observation is one sensor's assessment of one frame.
type Observation struct {
	Sensor   Name     `json:"sensor"`
	Level    Level    `json:"level"`
	Identity Identity `json:"identity"`
	// Reason is a fixed code of ours ("rule:path_outside_scope",
	// "degraded:timeout"), never text from a model or the worker.
	Reason string `json:"reason"`
}

// Cause says why a reading is degraded.
type Cause uint8

const (
	NotDegraded   Cause = iota
	Outage              // the endpoint could not be reached or answered an error
	Timeout             // the deadline passed
	UnpinnedModel       // the answer came from a model outside the pinned set
	Malformed           // the answer was not the strict schema (including unknown values and refusals)
	OverBudget          // the request or the answer exceeded its byte budget
	Canceled            // the caller gave up
)

func (c Cause) String() string {
	switch c {
	case NotDegraded:
		return "none"
	case Outage:
		return "outage"
	case Timeout:
		return "timeout"
	case UnpinnedModel:
		return "unpinned_model"
	case Malformed:
		return "malformed"
	case OverBudget:
		return "over_budget"
	case Canceled:
		return "canceled"
	}
	return "unknown"
}

// Fault is the regulator fault a degraded reading reports.
func (c Cause) Fault() regulator.Fault {
	switch c {
	case NotDegraded:
		return 0
	case UnpinnedModel:
		return regulator.UnpinnedModel
	}
	return regulator.SemanticOutage
}

// Reading is the bank's answer for one frame: one observation per sensor,
// in Bank order.
type Reading struct {
	Observations [BankSize]Observation
	Cause        Cause
}

// degraded is the reading every failure produces.
func degraded(id Identity, c Cause) Reading {
	r := Reading{Cause: c}
	for i, n := range Bank() {
		r.Observations[i] = Observation{Sensor: n, Level: Degraded, Identity: id, Reason: "degraded:" + c.String()}
	}
	return r
}

// Get returns the observation of sensor n (Degraded if n is not in the
// bank).
func (r *Reading) Get(n Name) Observation {
	for _, o := range r.Observations {
		if o.Sensor == n {
			return o
		}
	}
	return Observation{Sensor: n, Level: Degraded, Reason: "degraded:not_in_bank"}
}

// Signals turns the reading into authority signals, all of them Semantic
// Observation. High risk yields (narrows to in-domain work) or, for
// authority escalation and a runaway trajectory, preempts; a degraded
// sensor narrows below class 3, which needs semantic evidence.
func (r *Reading) Signals() [BankSize]authority.Signal {
	var out [BankSize]authority.Signal
	for i, o := range r.Observations {
		s := authority.Signal{Source: authority.SourceSemantic, Code: string(o.Sensor) + ":" + o.Level.String()}
		switch o.Level {
		case Low:
			s.Action = authority.Continue
		case Medium:
			s.Action = authority.Throttle
		case High:
			s.Action, s.Ceiling = authority.Narrow, authority.ClassIsolated
			if o.Sensor == AuthorityEscalation || o.Sensor == TrajectoryRegime {
				s.Action = authority.Interrupt
			}
		default:
			s.Action, s.Ceiling = authority.Narrow, authority.ClassObservable
		}
		out[i] = s
	}
	return out
}

// Trajectory gives the homeostat's semantic inputs: drift (the worse of
// scope drift and trajectory regime) and uncertainty (evidence
// insufficiency, or 1 when the reading is degraded).
func (r *Reading) Trajectory() (drift, uncertainty float64) {
	drift = max(r.Get(ScopeDrift).Level.Risk(), r.Get(TrajectoryRegime).Level.Risk())
	uncertainty = r.Get(EvidenceSufficiency).Level.Risk()
	if r.Cause != NotDegraded {
		uncertainty = 1
	}
	return drift, uncertainty
}

// EventKind is what happened in the episode's recent history.
type EventKind uint8

const (
	EventEdit             EventKind = iota + 1 // the worker changed the workspace
	EventTestPassed                            // the verification command passed
	EventTestFailed                            // it failed
	EventCommandFailed                         // an effect's target refused or failed its commit
	EventCapabilityDenied                      // the lease refused a request
	EventEffectProposed
	EventEffectCommitted
	EventViolation    // the domain made a call its profile forbids
	EventEffectDenied // a decision refused an effect (verification, the bank)
	EventRepair       // the generation was destroyed and restored from a checkpoint
)

func (k EventKind) String() string {
	switch k {
	case EventEdit:
		return "edit"
	case EventTestPassed:
		return "test_passed"
	case EventTestFailed:
		return "test_failed"
	case EventCommandFailed:
		return "command_failed"
	case EventCapabilityDenied:
		return "capability_denied"
	case EventEffectProposed:
		return "effect_proposed"
	case EventEffectCommitted:
		return "effect_committed"
	case EventViolation:
		return "violation"
	case EventEffectDenied:
		return "effect_denied"
	case EventRepair:
		return "repair"
	}
	return "unknown"
}

// Event is one history entry. Detail is a short, kernel-made description
// (a command's argv[0], a denial reason): it is still redacted and bounded
// before it reaches a model.
type Event struct {
	Kind   EventKind
	Detail string
	// Added and Removed count the lines an edit adds and removes, Deleted
	// the files it deletes; zero for every other kind.
	Added, Removed, Deleted int
}

// Edit is the EventEdit of a unified diff: its added and removed lines and
// the files it deletes.
func Edit(diff []byte) Event {
	e := Event{Kind: EventEdit}
	for line := range bytes.Lines(diff) {
		switch {
		case bytes.HasPrefix(line, []byte("deleted file mode")):
			e.Deleted++
		case bytes.HasPrefix(line, []byte("+++")) || bytes.HasPrefix(line, []byte("---")):
		case len(line) > 0 && line[0] == '+':
			e.Added++
		case len(line) > 0 && line[0] == '-':
			e.Removed++
		}
	}
	return e
}

// Effect is the effect a frame is about, if any.
type Effect struct {
	Kind   string
	Target string
	Class  authority.Class
	// Exempt: the operator's configuration exempts this kind from
	// automatic verification (unverified_kinds), so no test can be its
	// evidence and its absence is not a finding.
	Exempt bool
}

// Frame is the input to the bank: what the worker intends, what it did and
// what it proposes.
type Frame struct {
	Intent  string   // the episode's origin intent
	Scope   []string // globs of the paths the intent is about (the lease's allow list)
	Paths   []string // paths the diff touches
	Diff    []byte   // unified diff of the workspace against its base
	History []Event  // oldest first
	Effect  *Effect  // the proposed effect, nil if none
	// Dependencies: the lease lifts the dependencies rule
	// (authority.LiftDependencies), so a change to a dependency manifest
	// is not an escalation.
	Dependencies bool
}

// SemanticSensor is the bank as the kernel consumes it. Observe never
// fails: failure is a degraded Reading.
type SemanticSensor interface {
	Observe(ctx context.Context, f *Frame) Reading
}
