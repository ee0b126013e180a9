package episode

import (
	"errors"
	"testing"
)

// TestIllegalEpisodeTransitions walks every pair of states: the table's
// moves are allowed, every other one is a typed error, and a final state
// has no way out.
func TestIllegalEpisodeTransitions(t *testing.T) {
	legal := map[[2]State]bool{}
	for _, from := range States() {
		for _, to := range next(from) {
			legal[[2]State{from, to}] = true
		}
	}
	illegal := 0
	for _, from := range States() {
		for _, to := range States() {
			err := transition(from, to)
			if legal[[2]State{from, to}] {
				if err != nil {
					t.Errorf("%s → %s: %v", from, to, err)
				}
				continue
			}
			illegal++
			var ie *ErrIllegalTransition
			if !errors.As(err, &ie) || ie.From != from || ie.To != to {
				t.Errorf("%s → %s: err = %v, want ErrIllegalTransition", from, to, err)
			}
		}
	}
	if illegal == 0 || len(legal)+illegal != len(States())*len(States()) {
		t.Fatalf("walked %d illegal and %d legal transitions", illegal, len(legal))
	}
	for _, s := range []State{Completed, Contained, Aborted} {
		if !s.Final() || s.storeState() == "active" {
			t.Errorf("%s is not final in both tables", s)
		}
	}
	for _, s := range []State{Pending, Starting, Running, Repairing, Suspended} {
		if s.Final() {
			t.Errorf("%s is final", s)
		}
		if !Allowed(s, Aborted) {
			t.Errorf("%s cannot be aborted", s)
		}
	}
	// Nothing returns to pending or starting: an episode starts once.
	for _, from := range States() {
		if Allowed(from, Pending) || (from != Pending && Allowed(from, Starting)) {
			t.Errorf("%s may restart the episode", from)
		}
	}
}
