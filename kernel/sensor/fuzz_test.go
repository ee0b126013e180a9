package sensor

import (
	"testing"
	"time"
)

// FuzzParseResponse: whatever an endpoint sends, the reading is either a
// full, non-degraded bank from a pinned model, or fully degraded.
func FuzzParseResponse(f *testing.F) {
	valid := `{"model":"` + pinned + `","choices":[{"finish_reason":"stop","message":{"content":"{\"schema\":\"autonomic.sensor.v1\",\"observations\":{\"scope_drift\":\"low\",\"authority_escalation\":\"medium\",\"evidence_sufficiency\":\"high\",\"irreversibility\":\"low\",\"trajectory_regime\":\"low\"}}"}}]}`
	for _, s := range []string{valid, `{"model":"x","choices":[]}`, `{}`, `[]`, `{"model":"` + pinned + `","model":"` + pinned + `"}`} {
		f.Add([]byte(s))
	}
	c, err := NewClient(ClientConfig{Endpoint: "http://127.0.0.1:9/v1", Model: pinned, AllowedModels: []string{pinned},
		Timeout: time.Second, RequestLimit: 8 << 10, EvidenceLimit: 4 << 10, ResponseLimit: 8 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := c.parse(b)
		for _, o := range rd.Observations {
			if (rd.Cause == NotDegraded) != (o.Level != Degraded) {
				t.Fatalf("mixed reading %+v", rd)
			}
			if rd.Cause == NotDegraded && o.Identity.Model != pinned {
				t.Fatalf("answer from %q accepted", o.Identity.Model)
			}
		}
	})
}
