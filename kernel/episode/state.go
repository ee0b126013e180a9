package episode

import (
	"fmt"

	"github.com/autonomic-kernel/autonomic/store"
)

// State is an episode's lifecycle state as the controller drives it. The
// store keeps the authoritative subset (active or final); the rest is the
// controller's view of where an active episode is.
type State string

const (
	Pending   State = "pending"   // spec accepted, nothing created
	Starting  State = "starting"  // episode, lease, workspace, socket being created
	Running   State = "running"   // a generation runs under the current epoch
	Repairing State = "repairing" // epoch advanced; old generation going, new one coming
	Suspended State = "suspended" // authority or broker lost; domain destroyed, awaiting resume
	Completed State = "completed"
	Contained State = "contained"
	Aborted   State = "aborted"
)

// States lists every state, for tests and operators.
func States() []State {
	return []State{Pending, Starting, Running, Repairing, Suspended, Completed, Contained, Aborted}
}

// next is the transition table: the only place that says which state may
// follow which. Final states have no successor.
func next(from State) []State {
	switch from {
	case Pending:
		// A new episode starts; one the controller takes over at kernel
		// start (Recover) enters suspended: its authority died with the
		// previous kernel and its domain is not yet proven gone, so it
		// never runs before it is resumed as a repair.
		return []State{Starting, Suspended, Aborted}
	case Starting:
		return []State{Running, Aborted, Contained}
	case Running:
		return []State{Repairing, Suspended, Completed, Contained, Aborted}
	case Repairing:
		// A repair that cannot finish (authority lost mid-way) suspends;
		// one that runs out of repairs or checkpoints contains.
		return []State{Running, Suspended, Contained, Aborted}
	case Suspended:
		// Resuming is a repair: a new epoch and a restored generation.
		return []State{Repairing, Contained, Aborted}
	}
	return nil
}

// ErrIllegalTransition is returned for a move the table does not allow.
type ErrIllegalTransition struct{ From, To State }

func (e *ErrIllegalTransition) Error() string {
	return fmt.Sprintf("episode: illegal transition %s → %s", e.From, e.To)
}

// Allowed reports whether the table permits from → to.
func Allowed(from, to State) bool {
	for _, s := range next(from) {
		if s == to {
			return true
		}
	}
	return false
}

// transition checks one move against the table.
func transition(from, to State) error {
	if !Allowed(from, to) {
		return &ErrIllegalTransition{From: from, To: to}
	}
	return nil
}

// Final reports whether no state follows s.
func (s State) Final() bool { return len(next(s)) == 0 }

// storeState is the authoritative state a final controller state records.
func (s State) storeState() store.EpisodeState {
	switch s {
	case Completed:
		return store.EpisodeCompleted
	case Contained:
		return store.EpisodeContained
	case Aborted:
		return store.EpisodeAborted
	}
	return store.EpisodeActive
}
