package authority

// Source is where a signal comes from. Higher values take precedence:
// the order is the lattice of ARCHITECTURE §6.
type Source uint8

const (
	SourceInvalid    Source = iota
	SourceSemantic          // Semantic Observation
	SourceHuman             // Human Authority
	SourcePolicy            // Signed Policy
	SourceInvariant         // Deterministic Invariant
	SourceCapability        // Capability Violation
	SourceKernel            // Kernel Denial
)

func (s Source) String() string {
	switch s {
	case SourceSemantic:
		return "semantic_observation"
	case SourceHuman:
		return "human_authority"
	case SourcePolicy:
		return "signed_policy"
	case SourceInvariant:
		return "deterministic_invariant"
	case SourceCapability:
		return "capability_violation"
	case SourceKernel:
		return "kernel_denial"
	}
	return "invalid"
}

// Action is what a signal asks of the control loop, in increasing
// severity. Continue is the only non-negative action.
type Action uint8

const (
	Continue  Action = iota
	Throttle         // halve the brokered effect rate
	Narrow           // lower the class ceiling to Signal.Ceiling
	Revoke           // the lease is void: no effect may be made under it
	Interrupt        // stop the worker now (preempt); nothing commits meanwhile
	Contain          // end autonomy: repair or final containment
)

func (a Action) String() string {
	switch a {
	case Continue:
		return "continue"
	case Throttle:
		return "throttle"
	case Narrow:
		return "narrow"
	case Revoke:
		return "revoke"
	case Interrupt:
		return "interrupt"
	case Contain:
		return "contain"
	}
	return "invalid"
}

// Signal is one input to Decide.
type Signal struct {
	Source Source
	Action Action
	// Ceiling is the highest class still allowed, for Narrow.
	Ceiling Class
	// Grant asks to authorise a commit or a bounded expansion (the slow
	// loop). Only Signed Policy and Human Authority may grant; from any
	// other source it is ignored, and it is void next to any objection.
	Grant bool
	// Code says why, for the record (a sensor name, a Reason, a rule id).
	Code string
}

// Verdict is Decide's answer.
type Verdict struct {
	Action Action
	// Ceiling is the lowest class ceiling any signal asked for (MaxClass
	// when none narrowed; ClassLocal once the lease is void).
	Ceiling Class
	// Granted: a grant from Signed Policy or Human Authority stands,
	// because no signal of any source objects.
	Granted bool
	// Decider is the signal that fixed Action (the most severe; on a tie,
	// the one of highest precedence; on a further tie, the first), or the
	// granting signal of highest precedence when the verdict is a grant.
	Decider Signal
	// Invalid counts signals whose source, action or ceiling was out of
	// range; each was treated as a containment.
	Invalid int
}

// semanticCap is the most a Semantic Observation may ask: it may yield,
// narrow or preempt, never revoke or contain on its own authority
// (containment from accumulated semantic evidence goes through the
// homeostat, a Deterministic Invariant).
const semanticCap = Interrupt

// Decide is the precedence lattice: one pure function over a set of
// signals. Negative actions join (the most severe wins, whatever its
// source), so no signal can cancel another's contraction; precedence picks
// the decider among equals and says who may grant. It does not allocate.
func Decide(signals []Signal) Verdict {
	v := Verdict{Action: Continue, Ceiling: MaxClass}
	var grant Signal
	rank := SourceInvalid // precedence of v.Decider
	for _, s := range signals {
		act, src, ceiling := s.Action, s.Source, MaxClass
		switch {
		case src == SourceInvalid || src > SourceKernel || act > Contain || s.Ceiling > MaxClass:
			// A malformed authority input is itself a fault: fail closed,
			// ranked as high as anything can be.
			v.Invalid++
			act, src = Contain, SourceKernel
		case src == SourceKernel && act != Continue:
			// A kernel denial (seccomp violation, forbidden-path write)
			// always contains, whatever the reporter asked for.
			act = Contain
		case src == SourceSemantic && act > semanticCap:
			act = semanticCap
		}
		if act == Narrow {
			ceiling = s.Ceiling
		} else if act >= Revoke {
			ceiling = ClassLocal
		}
		v.Ceiling = min(v.Ceiling, ceiling)
		if act > v.Action || act == v.Action && act != Continue && src > rank {
			v.Action, v.Decider, rank = act, s, src
			v.Decider.Action, v.Decider.Grant = act, false
		}
		if act == Continue && s.Grant && (src == SourcePolicy || src == SourceHuman) && src > grant.Source {
			grant = s
		}
	}
	if v.Action == Continue && grant.Source != SourceInvalid {
		v.Granted, v.Decider = true, grant
	}
	return v
}

// Effective is the lease a verdict leaves standing: never wider than lease.
// Revoke, Interrupt and Contain void it; Narrow lowers its class ceiling;
// Throttle halves its effect rate. A grant does not widen anything here:
// expansion is a new Mint from a newer signed policy, on the slow path.
func Effective(lease Capability, v Verdict) Capability {
	if !lease.ok || v.Action >= Revoke {
		return Capability{}
	}
	out := lease.Narrow(v.Ceiling)
	if v.Action == Throttle {
		out.budget.EffectsPerMinute /= 2
	}
	return out
}
