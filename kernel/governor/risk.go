package governor

import (
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
)

// bankSignals are the sensor bank's signals for one evaluation, and the
// signed policy's semantic.max_risk over them: when any observation's
// risk (sensor.Level.Risk; a degraded reading is risk 1) is above
// max_risk, the episode yields rather than proceeds — a Signed Policy
// narrowing to class 2, so no authoritative (class 3) or irreversible
// (class 4) effect is allowed by this evaluation, and the narrowing holds
// at the commit horizon until the next evaluation (holdSlow). A human
// approval does not lift it: Signed Policy outranks Human Authority.
func bankSignals(readings []sensor.Reading, maxRisk float64) []authority.Signal {
	out := make([]authority.Signal, 0, len(readings)*sensor.BankSize+1)
	risk := 0.0
	for i := range readings {
		s := readings[i].Signals()
		out = append(out, s[:]...)
		for _, o := range readings[i].Observations {
			risk = max(risk, o.Level.Risk())
		}
		if readings[i].Cause != sensor.NotDegraded {
			risk = 1
		}
	}
	if risk > maxRisk {
		out = append(out, authority.Signal{Source: authority.SourcePolicy, Action: authority.Narrow,
			Ceiling: authority.ClassObservable, Code: "max_risk"})
	}
	return out
}
