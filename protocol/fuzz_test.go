package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/; these targets state
// the properties every decoder must keep on any input:
//   - it never panics;
//   - it answers as its oracle (oracle_test.go), the code and the value;
//   - every refusal is a catalogue code other than internal;
//   - whatever it admits re-encodes to something it admits again, with the
//     same meaning (encoding is a fixed point after one round);
//   - a decoded request passes Validate.

func wantCatalogued(t *testing.T, err error) {
	t.Helper()
	if AsWire(err).Code == CodeInternal {
		t.Fatalf("refusal is not a catalogue code: %v", err)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x02{}"))
	const max = 1 << 10
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		b, err := ReadFrame(r, max, time.Time{})
		if err != nil {
			wantCatalogued(t, err)
			if IsEOF(err) && len(in) != 0 {
				t.Fatal("IsEOF on a non-empty stream")
			}
			return
		}
		if len(b) == 0 || len(b) > max {
			t.Fatalf("frame of %d bytes admitted, cap %d", len(b), max)
		}
		var out bytes.Buffer
		if err := WriteFrame(&out, b, max); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatal("frame does not re-encode to the bytes it was read from")
		}
		if int(r.Size())-r.Len() != out.Len() {
			t.Fatal("ReadFrame consumed bytes beyond its frame")
		}
	})
}

func FuzzCheckShape(f *testing.F) {
	f.Add([]byte(`{"a":[1,{"b":null}]}`))
	limits := []Limits{{MaxDepth: 4, MaxNodes: 64}, {MaxDepth: 1, MaxNodes: 1}, LauncherResponseSchema().Limits}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, lim := range limits {
			err := CheckShape(in, lim)
			// The scanner and the Token walk it replaced give the same
			// verdict on every input.
			if got, want := codeOf(err), codeOf(tokenWalk(in, lim)); got != want {
				t.Fatalf("%q under %+v: CheckShape %q, Token walk %q (%v)", in, lim, got, want, err)
			}
			// The scanner that now also serves Admit and DecodeStrict
			// answers CheckShape as the one before it did, word for word.
			if old := oldCheckShape(in, lim); fmt.Sprint(err) != fmt.Sprint(old) {
				t.Fatalf("%q under %+v: CheckShape %v, before %v", in, lim, err, old)
			}
			if err != nil {
				wantCatalogued(t, err)
				continue
			}
			if !json.Valid(in) || !gjson.ValidBytes(in) {
				t.Fatalf("CheckShape admitted invalid JSON %q", in)
			}
			// Re-encoding (keys sorted, whitespace gone) keeps the shape.
			var v any
			dec := json.NewDecoder(bytes.NewReader(in))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			if _, ok := v.(map[string]any); !ok {
				t.Fatalf("admitted a non-object %q", in)
			}
			again, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckShape(again, lim); err != nil {
				t.Fatalf("re-encoded %q refused: %v", again, err)
			}
		}
	})
}

func FuzzAdmitLauncherRequest(f *testing.F) {
	f.Add([]byte(`{"protocol":1,"action":"preflight","request_id":"r"}`))
	s := LauncherRequestSchema()
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := s.Admit(in)
		old, oldErr := oldAdmit(s, in)
		sameAnswer(t, in, a, err, old, oldErr)
		if err != nil {
			wantCatalogued(t, err)
			return
		}
		if !slices.Contains(LauncherVersions(), a.Version) || s.Kinds[a.Kind].Required == nil {
			t.Fatalf("admission %+v", a)
		}
		// An independent parser (gjson) must see the top-level keys
		// admission and decoding see, or admission checked one document
		// and decoding reads another.
		var m map[string]json.RawMessage
		if err := json.Unmarshal(in, &m); err != nil {
			t.Fatal(err)
		}
		var gkeys []string
		gjson.ParseBytes(in).ForEach(func(k, _ gjson.Result) bool { gkeys = append(gkeys, k.Str); return true })
		slices.Sort(gkeys)
		jkeys := make([]string, 0, len(m))
		for k := range m {
			jkeys = append(jkeys, k)
		}
		slices.Sort(jkeys)
		if !slices.Equal(gkeys, jkeys) {
			t.Fatalf("gjson keys %q, encoding/json keys %q", gkeys, jkeys)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		a2, err := s.Admit(again)
		if err != nil || a2 != a {
			t.Fatalf("re-encoded %q: %+v, %v", again, a2, err)
		}
	})
}

func FuzzDecodeLauncherRequest(f *testing.F) {
	f.Add([]byte(`{"protocol":1,"action":"destroy","request_id":"r","domain_id":"d"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := DecodeLauncherRequest(in)
		old, oldErr := oldDecodeLauncherRequest(in)
		sameAnswer(t, in, r, err, old, oldErr)
		if err != nil {
			wantCatalogued(t, err)
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded request fails Validate: %v", err)
		}
		if !slices.Contains(LauncherVersions(), r.Protocol) {
			t.Fatalf("protocol %d", r.Protocol)
		}
		b1, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeLauncherRequest(b1)
		if err != nil {
			t.Fatalf("re-encoded request %q refused: %v", b1, err)
		}
		b2, err := Encode(r2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not a fixed point:\n%s\n%s", b1, b2)
		}
		if r.Action == ActionCreate && r.Seccomp != nil {
			if _, err := r.Seccomp.Decode(); err != nil {
				t.Fatal("admitted a program that does not decode")
			}
		}
	})
}

func FuzzDecodeLauncherResponse(f *testing.F) {
	f.Add([]byte(`{"protocol":1,"request_id":"r","type":"domain","domain":{"domain_id":"d","exists":false,"populated":false,"frozen":false,"processes":0,"has_upper":false}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := DecodeLauncherResponse(in)
		old, oldErr := oldDecodeLauncherResponse(in)
		sameAnswer(t, in, r, err, old, oldErr)
		if err != nil {
			wantCatalogued(t, err)
			return
		}
		if !r.hasBody() {
			t.Fatal("decoded a response without its body")
		}
		if r.Type == TypeError && (!Known(r.Error.Code) || *r.Error != *E(r.Error.Code)) {
			t.Fatalf("error frame not reduced to the catalogue: %+v", r.Error)
		}
		b1, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeLauncherResponse(b1)
		if err != nil {
			t.Fatalf("re-encoded response %q refused: %v", b1, err)
		}
		b2, err := Encode(r2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not a fixed point:\n%s\n%s", b1, b2)
		}
	})
}
