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
		if !decodeOrRefuse(t, b, &req) {
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
		if !decodeOrRefuse(t, b, &a) {
			return
		}
		again, _ := json.Marshal(a)
		var back protocol.Approval
		if err := readBody(httptest.NewRequest("POST", "/", bytes.NewReader(again)), &back); err != nil || back != a {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", b, again, err)
		}
	})
}

// FuzzDecodeSpec: an operator's episode spec is refused with a catalogue
// error or admitted with max_repairs within the kernel's; an admitted spec
// re-encodes to a document admitted again, unchanged.
func FuzzDecodeSpec(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		const kernelMax = 3
		spec, err := decodeSpec(b, kernelMax)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || !protocol.Known(pe.Code) {
				t.Fatalf("refusal outside the catalogue: %v", err)
			}
			return
		}
		if spec.MaxRepairs > kernelMax {
			t.Fatalf("admitted max_repairs %d above the kernel's %d", spec.MaxRepairs, kernelMax)
		}
		once, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeSpec(once, kernelMax)
		if err != nil {
			t.Fatalf("re-encoded spec refused: %v\n%s", err, once)
		}
		if twice, _ := json.Marshal(back); !bytes.Equal(once, twice) {
			t.Fatalf("round trip changed the spec:\n%s\n%s", once, twice)
		}
	})
}

// FuzzReadActionBodies: the snooze and dismiss bodies (POST
// /v1/actions/{id}/snooze, …/dismiss) are refused with a catalogue error
// or decode to a request that re-encodes to what the decoder accepts
// again; what they may say (duration, feedback) the store checks next.
func FuzzReadActionBodies(f *testing.F) {
	for _, s := range []string{`{"seconds":3600}`, `{"feedback":"wrong_call"}`, `{"seconds":-1}`, `{"seconds":1e99}`,
		`{"feedback":"x","feedback":"y"}`, `{"seconds":1,"extra":2}`, `[]`, ``, `{"decision":"allow"}`, `{"decision":"deny","decision":"allow"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(req, back any) {
			if !decodeOrRefuse(t, b, req) {
				return
			}
			again, _ := json.Marshal(req)
			if err := readBody(httptest.NewRequest("POST", "/", bytes.NewReader(again)), back); err != nil {
				t.Fatalf("accepted %q but not its re-encoding %q: %v", b, again, err)
			}
		}
		check(&SnoozeRequest{}, &SnoozeRequest{})
		check(&DismissRequest{}, &DismissRequest{})
		check(&ResolveRequest{}, &ResolveRequest{})
	})
}

// FuzzReadTaskRequest: a task submission (POST /v1/tasks) is refused with
// a catalogue error or decoded into a request whose re-encoding the same
// decoder accepts as the same request. Its spec is then admitted as a
// start admits it (FuzzDecodeSpec).
func FuzzReadTaskRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var req TaskRequest
		if !decodeOrRefuse(t, b, &req) {
			return
		}
		again, _ := json.Marshal(req)
		var back TaskRequest
		if err := readBody(httptest.NewRequest("POST", "/", bytes.NewReader(again)), &back); err != nil {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", b, again, err)
		}
		var c1, c2 bytes.Buffer
		_ = json.Compact(&c1, req.Spec)
		_ = json.Compact(&c2, back.Spec)
		if back.Project != req.Project || back.Priority != req.Priority || back.MinClass != req.MinClass || c1.String() != c2.String() {
			t.Fatalf("accepted %q as %+v, its re-encoding as %+v", b, req, back)
		}
	})
}

// decodeOrRefuse reads b into v as the API reads a body: false when it is
// refused, which must be with a catalogue error.
func decodeOrRefuse(t *testing.T, b []byte, v any) bool {
	t.Helper()
	err := readBody(httptest.NewRequest("POST", "/", bytes.NewReader(b)), v)
	if err == nil {
		return true
	}
	var pe *protocol.Error
	if !errors.As(err, &pe) || !protocol.Known(pe.Code) {
		t.Fatalf("refusal outside the catalogue: %v", err)
	}
	return false
}
