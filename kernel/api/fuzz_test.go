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

// FuzzReadApproval: the approval body (POST /v1/effects/{id}/approval) is
// refused with a catalogue error or decoded into an approval whose
// re-encoding the same decoder accepts as the same approval. Its signature
// is the broker's business; this is the shape the API admits.
func FuzzReadApproval(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var a protocol.Approval
		err := readBody(httptest.NewRequest("POST", "/", bytes.NewReader(b)), &a)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || !protocol.Known(pe.Code) {
				t.Fatalf("refusal outside the catalogue: %v", err)
			}
			return
		}
		again, _ := json.Marshal(a)
		var back protocol.Approval
		if err := readBody(httptest.NewRequest("POST", "/", bytes.NewReader(again)), &back); err != nil || back != a {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", b, again, err)
		}
	})
}
