package config

import (
	"errors"
	"os"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// FuzzParse: any input either yields a validated configuration or a
// *Error carrying a catalogue code; never a panic, never an untyped error.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile(examplePath); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"state_dir":"/s","domain":{"backend":"unsafe_local"},"sensor":{"kind":"rules"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil {
			if c.StateDir == "" || c.EffectConcurrency < 1 || c.OwnerTTLMS < 1000 {
				t.Fatalf("accepted an invalid configuration: %+v", c)
			}
			return
		}
		var ce *Error
		if !errors.As(err, &ce) || len(ce.Problems) == 0 {
			t.Fatalf("untyped error: %v", err)
		}
		if !protocol.Known(protocol.AsWire(err).Code) {
			t.Fatalf("code outside the catalogue: %v", err)
		}
	})
}
