package store

import (
	"fmt"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// EffectState is a state of the commit horizon (ARCHITECTURE §5).
type EffectState string

// The states. The order of declaration is the forward path.
const (
	Proposed      EffectState = "proposed"
	Prepared      EffectState = "prepared"
	Evaluating    EffectState = "evaluating"
	Ready         EffectState = "ready"
	CommitIntent  EffectState = "commit_intent"
	Committing    EffectState = "committing"
	Committed     EffectState = "committed"
	Aborted       EffectState = "aborted"
	Expired       EffectState = "expired"
	Stale         EffectState = "stale"
	CommitUnknown EffectState = "commit_unknown"
	Failed        EffectState = "failed"
)

// States lists every effect state.
func States() []EffectState {
	return []EffectState{Proposed, Prepared, Evaluating, Ready, CommitIntent, Committing, Committed,
		Aborted, Expired, Stale, CommitUnknown, Failed}
}

// transitions is the one table of legal effect state changes. Everything
// that moves an effect — the generic Transition call, BeginCommit,
// FinishCommit, AdvanceEpoch — consults it; nothing else decides.
//
// Two deliberate readings of the diagram in ARCHITECTURE §5:
//
//   - commit_intent may not become stale or expired. From commit_intent on,
//     an adapter may have acted; only an outcome (or aborted, when
//     reconciliation proves the adapter never acted) may follow. An epoch
//     advance leaves such effects for reconciliation (issue 4, §3).
//   - commit_unknown is not terminal: reconciliation settles it to
//     committed or failed, and nothing else may.
//   - → proposed from any state before the horizon is a revision: the
//     worker re-proposed, the revision increases and the effect starts the
//     horizon again (ReviseEffect is the only way to take it).
var transitions = map[EffectState][]EffectState{
	Proposed:      {Proposed, Prepared, Aborted, Expired, Stale},
	Prepared:      {Proposed, Evaluating, Aborted, Expired, Stale},
	Evaluating:    {Proposed, Ready, Aborted, Expired, Stale},
	Ready:         {Proposed, CommitIntent, Aborted, Expired, Stale},
	CommitIntent:  {Committing, Aborted, CommitUnknown, Failed},
	Committing:    {Committed, CommitUnknown, Failed},
	CommitUnknown: {Committed, Failed},
	Committed:     nil,
	Aborted:       nil,
	Expired:       nil,
	Stale:         nil,
	Failed:        nil,
}

// CanTransition reports whether from → to is in the table.
func CanTransition(from, to EffectState) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// checkTransition is CanTransition as a typed error. Moving a stale effect
// is reported as stale_authority rather than illegal_transition: the effect
// was fenced by an epoch advance, and the worker's remedy is to re-propose
// under the current epoch, which is what stale_authority tells it.
func checkTransition(from, to EffectState) error {
	if CanTransition(from, to) {
		return nil
	}
	if from == Stale {
		return protocol.Errorf(protocol.CodeStaleAuthority, "effect was fenced by an epoch advance")
	}
	return protocol.Errorf(protocol.CodeIllegalTransition, "effect %s → %s", from, to)
}

// Terminal reports whether no transition leaves s.
func (s EffectState) Terminal() bool {
	_, known := transitions[s]
	return known && len(transitions[s]) == 0
}

// Valid reports whether s is a known state.
func (s EffectState) Valid() bool {
	_, ok := transitions[s]
	return ok
}

// PreIntent reports whether s is before the commit horizon: an epoch
// advance stales effects in these states.
func (s EffectState) PreIntent() bool {
	switch s {
	case Proposed, Prepared, Evaluating, Ready:
		return true
	}
	return false
}

// Unsettled reports whether s needs reconciliation after a restart: the
// adapter may have acted and no outcome is recorded.
func (s EffectState) Unsettled() bool {
	switch s {
	case CommitIntent, Committing, CommitUnknown:
		return true
	}
	return false
}

func (s EffectState) String() string { return string(s) }

// parseState admits a state read from the database; an unknown one means
// the schema and binary disagree, which is never safe to act on.
func parseState(s string) (EffectState, error) {
	st := EffectState(s)
	if !st.Valid() {
		return "", fmt.Errorf("store: unknown effect state %q in database", s)
	}
	return st, nil
}
