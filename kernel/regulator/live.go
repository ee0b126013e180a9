package regulator

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
)

// Live is the kernel's one regulator: locked, fed by every source of health
// (Report), read by everything that mints or checks authority (State). A
// nil *Live is no regulator: autonomy is act and reports change nothing.
type Live struct {
	log hclog.Logger

	mu  sync.Mutex
	reg *Regulator
	// faults is the union of the faults last reported per source.
	faults Fault
}

// NewLive returns the live regulator at cfg.Start.
func NewLive(cfg Config, log hclog.Logger) (*Live, error) {
	r, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Live{log: log, reg: r}, nil
}

// State is the regulator's reading (act, version 0, without one).
func (l *Live) State() State {
	if l == nil {
		return State{Level: Act}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reg.State()
}

// Ceiling is the class ceiling the current level puts on every lease.
func (l *Live) Ceiling() authority.Class { return l.State().Level.MaxClass() }

// Report folds one observation into the regulator. within names the
// faults this report speaks for (the store's reachability, the broker's
// saturation, the sensor bank's health); faults are those of them seen
// now. Faults outside within keep their last reported state, so one
// source's health never hides another's degradation. The regulator sees
// the union.
func (l *Live) Report(within, faults Fault) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = l.faults&^within | faults&within
	before := l.reg.Level()
	st, err := l.reg.Observe(Health{At: time.Now(), Faults: l.faults})
	if err != nil {
		l.log.Warn("regulator observation refused", "error", err)
		return
	}
	if st.Level != before {
		l.log.Warn("regulator: autonomy level changed", "from", before.String(), "to", st.Level.String(),
			"faults", st.Faults.String(), "max_class", int(st.Level.MaxClass()))
	}
}
