package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// FuzzReadBody: whatever an operator client sends, readBody either refuses
// it with a catalogue error or yields a request that re-encodes to JSON the
// same decoder accepts again.
func FuzzReadBody(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var req AbortRequest
		err := readBody(httptest.NewRequest("POST", "/", bytes.NewReader(b)), &req)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || !protocol.Known(pe.Code) {
				t.Fatalf("refusal outside the catalogue: %v", err)
			}
			return
		}
		again, _ := json.Marshal(req)
		var back AbortRequest
		if err := readBody(httptest.NewRequest("POST", "/", bytes.NewReader(again)), &back); err != nil || back != req {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", b, again, err)
		}
	})
}
