package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const (
	tUUID  = "0190a5c4-3b1e-7c2a-9d4e-1f2a3b4c5d6e"
	tUUID2 = "0190a5c4-3b1e-7c2a-9d4e-aaaaaaaaaaaa"
	tDig   = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

func sig64() string { return strings.Repeat("A", 86) + "==" }

func TestWorkerRequestAdmission(t *testing.T) {
	prep := `"request_id":"r","epoch":1,"action":"prepare","lease_id":"` + tUUID + `","kind":"artifact","target_id":"rel","target":{"name":"a"}`
	approval := `{"document":{"effect_id":"` + tUUID + `","effect_revision":1,"episode_id":"` + tUUID2 + `","epoch":1,"payload_digest":"` + tDig + `","decision":"allow"},"signature":"` + sig64() + `","key_id":"op"}`
	for _, tc := range []struct {
		name, in string
		want     Code
	}{
		{"prepare", `{"protocol":1,` + prep + `}`, ""},
		{"prepare payload", `{"protocol":1,` + prep + `,"payload_b64":"aGk="}`, ""},
		{"re-propose", `{"protocol":1,` + prep + `,"effect_id":"` + tUUID2 + `","revision":2}`, ""},
		{"re-propose without revision", `{"protocol":1,` + prep + `,"effect_id":"` + tUUID2 + `"}`, CodeMissingField},
		{"non-canonical payload", `{"protocol":1,` + prep + `,"payload_b64":"aGk"}`, CodeInvalidField},
		{"payload with newline", `{"protocol":1,` + prep + `,"payload_b64":"aG\\nk="}`, CodeInvalidField},
		{"target not object", `{"protocol":1,"request_id":"r","epoch":1,"action":"prepare","lease_id":"` + tUUID + `","kind":"artifact","target_id":"rel","target":[1]}`, CodeInvalidField},
		{"target null", `{"protocol":1,"request_id":"r","epoch":1,"action":"prepare","lease_id":"` + tUUID + `","kind":"artifact","target_id":"rel","target":null}`, CodeInvalidField},
		{"upper-case uuid", `{"protocol":1,"request_id":"r","epoch":1,"action":"status","effect_id":"` + strings.ToUpper(tUUID) + `"}`, CodeInvalidField},
		{"target_id path", `{"protocol":1,"request_id":"r","epoch":1,"action":"prepare","lease_id":"` + tUUID + `","kind":"artifact","target_id":"../x","target":{}}`, CodeInvalidField},
		{"epoch zero", `{"protocol":1,"request_id":"r","epoch":0,"action":"status","effect_id":"` + tUUID + `"}`, CodeInvalidField},
		{"epoch float", `{"protocol":1,"request_id":"r","epoch":1.5,"action":"status","effect_id":"` + tUUID + `"}`, CodeInvalidField},
		{"missing epoch", `{"protocol":1,"request_id":"r","action":"status","effect_id":"` + tUUID + `"}`, CodeMissingField},
		{"status", `{"protocol":1,"request_id":"r","epoch":1,"action":"status","effect_id":"` + tUUID + `"}`, ""},
		{"status with revision", `{"protocol":1,"request_id":"r","epoch":1,"action":"status","effect_id":"` + tUUID + `","revision":1}`, CodeUnknownField},
		{"commit", `{"protocol":1,"request_id":"r","epoch":1,"action":"commit","effect_id":"` + tUUID + `","revision":1}`, ""},
		{"commit with payload", `{"protocol":1,"request_id":"r","epoch":1,"action":"commit","effect_id":"` + tUUID + `","revision":1,"payload_b64":""}`, CodeUnknownField},
		{"fetch", `{"protocol":1,"request_id":"r","epoch":1,"action":"fetch_response","effect_id":"` + tUUID + `","offset":10,"limit":100}`, ""},
		{"fetch huge limit", `{"protocol":1,"request_id":"r","epoch":1,"action":"fetch_response","effect_id":"` + tUUID + `","limit":262145}`, CodeInvalidField},
		{"fetch negative offset", `{"protocol":1,"request_id":"r","epoch":1,"action":"fetch_response","effect_id":"` + tUUID + `","offset":-1}`, CodeInvalidField},
		{"evaluate approval", `{"protocol":1,"request_id":"r","epoch":1,"action":"evaluate","effect_id":"` + tUUID + `","revision":1,"approval":` + approval + `}`, ""},
		{"approval extra field", `{"protocol":1,"request_id":"r","epoch":1,"action":"evaluate","effect_id":"` + tUUID + `","revision":1,"approval":` + strings.Replace(approval, `"key_id"`, `"x":1,"key_id"`, 1) + `}`, CodeUnknownField},
		{"approval case-folded key", `{"protocol":1,"request_id":"r","epoch":1,"action":"evaluate","effect_id":"` + tUUID + `","revision":1,"approval":` + strings.Replace(approval, `"key_id"`, `"KEY_ID"`, 1) + `}`, CodeUnknownField},
		{"approval bad decision", `{"protocol":1,"request_id":"r","epoch":1,"action":"evaluate","effect_id":"` + tUUID + `","revision":1,"approval":` + strings.Replace(approval, `"allow"`, `"maybe"`, 1) + `}`, CodeInvalidField},
		{"version 2", `{"protocol":2,"request_id":"r","epoch":1,"action":"status","effect_id":"` + tUUID + `"}`, CodeUnsupportedVersion},
		{"launcher action", `{"protocol":1,"request_id":"r","epoch":1,"action":"create","effect_id":"` + tUUID + `"}`, CodeUnknownAction},
		{"duplicate", `{"protocol":1,"request_id":"r","epoch":1,"epoch":2,"action":"status","effect_id":"` + tUUID + `"}`, CodeDuplicateKey},
		{"deep target", `{"protocol":1,` + strings.Replace(prep, `{"name":"a"}`, `{"a":[[[[[[[[1]]]]]]]]}`, 1) + `}`, CodeTooDeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DecodeWorkerRequest([]byte(tc.in))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if err := r.Validate(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if AsWire(err).Code != tc.want {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
		})
	}
}

func TestWorkerPayloadBound(t *testing.T) {
	r := &WorkerRequest{Protocol: 1, RequestID: "r", Epoch: 1, Action: WorkerPrepare, LeaseID: tUUID, Kind: "artifact",
		TargetID: "t", Target: json.RawMessage(`{}`)}
	r.PayloadB64 = strings.Repeat("A", 4*(MaxWorkerPayload/3+2))
	if AsWire(r.Validate()).Code != CodeInvalidField {
		t.Fatal("oversized payload admitted")
	}
	// The largest payload still fits one frame.
	r.PayloadB64 = strings.Repeat("A", 4*(MaxWorkerPayload/3))
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ := Encode(r)
	if len(b) > WorkerRequestMax {
		t.Fatalf("maximal request of %d bytes exceeds the frame cap", len(b))
	}
}

func TestWorkerResponses(t *testing.T) {
	res := `{"id":"` + tUUID + `","episode_id":"` + tUUID2 + `","epoch":1,"revision":1,"kind":"http_read","class":"class_2_external_observable_or_compensatable","target_id":"d","state":"committed","payload_digest":"` + tDig + `"`
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"result", `{"protocol":1,"request_id":"r","ok":true,"result":` + res + `}}`, true},
		{"receipt", `{"protocol":1,"request_id":"r","ok":true,"result":` + res + `,"receipt":{"a":1}}}`, true},
		{"chunk", `{"protocol":1,"request_id":"r","ok":true,"result":` + res + `,"chunk":{"offset":0,"length":2,"total_size":2,"digest":"` + tDig + `","data_b64":"aGk=","eof":true}}}`, true},
		{"chunk lies", `{"protocol":1,"request_id":"r","ok":true,"result":` + res + `,"chunk":{"offset":0,"length":3,"total_size":3,"digest":"` + tDig + `","data_b64":"aGk=","eof":true}}}`, false},
		{"error", `{"protocol":1,"request_id":"r","ok":false,"error":{"code":"stale_authority","message":"anything","retryable":true}}`, true},
		{"error unknown code", `{"protocol":1,"ok":false,"error":{"code":"nope","message":"","retryable":false}}`, false},
		{"both", `{"protocol":1,"request_id":"r","ok":true,"result":` + res + `},"error":{"code":"internal","message":"","retryable":false}}`, false},
		{"ok without result", `{"protocol":1,"request_id":"r","ok":true}`, false},
		{"unknown class", `{"protocol":1,"request_id":"r","ok":true,"result":` + strings.Replace(res, "class_2_external_observable_or_compensatable", "class_1", 1) + `}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DecodeWorkerResponse([]byte(tc.in))
			if (err == nil) != tc.ok {
				t.Fatalf("ok=%v err=%v", tc.ok, err)
			}
			if err == nil && !r.OK && *r.Error != *E(r.Error.Code) {
				t.Fatal("peer's error text kept")
			}
		})
	}
}

func FuzzDecodeWorkerRequest(f *testing.F) {
	f.Add([]byte(`{"protocol":1,"request_id":"r","epoch":1,"action":"status","effect_id":"` + tUUID + `"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := DecodeWorkerRequest(in)
		old, oldErr := oldDecodeWorkerRequest(in)
		sameAnswer(t, in, r, err, old, oldErr)
		if err != nil {
			wantCatalogued(t, err)
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded request fails Validate: %v", err)
		}
		b1, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeWorkerRequest(b1)
		if err != nil {
			t.Fatalf("re-encoded request %q refused: %v", b1, err)
		}
		b2, err := Encode(r2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not a fixed point:\n%s\n%s", b1, b2)
		}
		if p, err := r.Payload(); err != nil || len(p) > MaxWorkerPayload {
			t.Fatal("admitted a payload that does not decode within its bound")
		}
	})
}

func FuzzDecodeWorkerResponse(f *testing.F) {
	f.Add([]byte(`{"protocol":1,"request_id":"r","ok":false,"error":{"code":"not_found","message":"","retryable":false}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := DecodeWorkerResponse(in)
		old, oldErr := oldDecodeWorkerResponse(in)
		sameAnswer(t, in, r, err, old, oldErr)
		if err != nil {
			wantCatalogued(t, err)
			return
		}
		if r.OK == (r.Result == nil) || r.OK == (r.Error != nil) {
			t.Fatal("decoded a response without exactly one body")
		}
		b1, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeWorkerResponse(b1)
		if err != nil {
			t.Fatalf("re-encoded response %q refused: %v", b1, err)
		}
		b2, err := Encode(r2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not a fixed point:\n%s\n%s", b1, b2)
		}
	})
}
