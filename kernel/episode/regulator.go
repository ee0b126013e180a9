package episode

import (
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
)

// regulatorState is the regulator's reading (act, version 0, without one).
func (k *Kernel) regulatorState() regulator.State {
	if k.reg == nil {
		return regulator.State{Level: regulator.Act}
	}
	k.regMu.Lock()
	defer k.regMu.Unlock()
	return k.reg.State()
}

// ReportHealth folds one observation into the regulator. within names the
// faults this report speaks for (the store's reachability, the broker's
// saturation, the sensor bank's health); faults are those of them seen
// now. Faults outside within keep their last reported state, so one
// source's health never hides another's degradation. The regulator sees
// the union.
func (k *Kernel) ReportHealth(within, faults regulator.Fault) {
	if k.reg == nil {
		return
	}
	k.regMu.Lock()
	defer k.regMu.Unlock()
	k.faults = k.faults&^within | faults&within
	before := k.reg.Level()
	st, err := k.reg.Observe(regulator.Health{At: time.Now(), Faults: k.faults})
	if err != nil {
		k.log.Warn("regulator observation refused", "error", err)
		return
	}
	if st.Level != before {
		k.log.Warn("regulator: autonomy level changed", "from", before.String(), "to", st.Level.String(),
			"faults", st.Faults.String(), "max_class", int(st.Level.MaxClass()))
	}
}

// Regulator is the regulator's reading (act, version 0, without one).
func (k *Kernel) Regulator() regulator.State { return k.regulatorState() }

// kernelRegulator is the controller's regulator as the governor reads it.
type kernelRegulator struct{ k *Kernel }

func (r kernelRegulator) State() regulator.State                { return r.k.regulatorState() }
func (r kernelRegulator) Report(within, faults regulator.Fault) { r.k.ReportHealth(within, faults) }

// ceiling is the class ceiling for every lease minted now: the configured
// ceiling under the regulator's level.
func (k *Kernel) ceiling() authority.Class {
	return min(k.cfg.Ceiling(), k.regulatorState().Level.MaxClass())
}
