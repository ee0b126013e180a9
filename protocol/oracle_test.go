package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The decoders as they were before one walk served admission and the
// exact-key check: the oracle the differential fuzz targets hold the
// decoders to (same code for every input, the same value when admitted),
// and the "old" side of the benchmarks. Its shape check is the old scanner
// (oldshape_test.go), itself held to the Token walk by FuzzCheckShape.

func oldAdmit(s *Schema, b []byte) (Admission, error) {
	if !utf8.Valid(b) {
		return Admission{}, E(CodeNotUTF8)
	}
	if err := oldCheckShape(b, s.Limits); err != nil {
		return Admission{}, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return Admission{}, Errorf(CodeMalformedJSON, "%w", err)
	}
	v, ok := top["protocol"]
	if !ok {
		return Admission{}, Errorf(CodeMissingField, "protocol")
	}
	version, ok := versionOf(v)
	if !ok {
		return Admission{}, Errorf(CodeInvalidField, "protocol")
	}
	if !slices.Contains(s.Versions, version) {
		return Admission{}, Errorf(CodeUnsupportedVersion, "version %.20s", v)
	}
	k, ok := top[s.Discriminator]
	if !ok {
		return Admission{}, Errorf(CodeMissingField, "%s", s.Discriminator)
	}
	var kind string
	if len(k) == 0 || k[0] != '"' || json.Unmarshal(k, &kind) != nil {
		return Admission{}, Errorf(CodeInvalidField, "%s", s.Discriminator)
	}
	fields, ok := s.Kinds[kind]
	if !ok {
		return Admission{}, Errorf(CodeUnknownAction, "%s %q", s.Discriminator, kind)
	}
	var unknown []string
	for key := range top {
		if key != "protocol" && key != s.Discriminator && !slices.Contains(fields.Required, key) && !slices.Contains(fields.Optional, key) {
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 {
		return Admission{}, Errorf(CodeUnknownField, "%q", slices.Min(unknown))
	}
	for _, r := range fields.Required {
		if _, ok := top[r]; !ok {
			return Admission{}, Errorf(CodeMissingField, "%q", r)
		}
	}
	return Admission{Version: version, Kind: kind}, nil
}

func oldDecodeStrict(b []byte, v any) error {
	var doc any
	generic := json.NewDecoder(bytes.NewReader(b))
	generic.UseNumber()
	if err := generic.Decode(&doc); err != nil {
		return Errorf(CodeMalformedJSON, "%w", err)
	}
	if err := oldExactKeys(doc, reflect.TypeOf(v), ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return Errorf(CodeInvalidField, "%s: %w", ute.Field, err)
		}
		if bytes.Contains([]byte(err.Error()), []byte("unknown field")) {
			return Errorf(CodeUnknownField, "%w", err)
		}
		return Errorf(CodeInvalidField, "%w", err)
	}
	return nil
}

func oldExactKeys(doc any, t reflect.Type, at string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		fields := jsonFields(t)
		for k, v := range obj {
			ft, ok := fields[k]
			if !ok {
				return Errorf(CodeUnknownField, "%q", at+k)
			}
			if err := oldExactKeys(v, ft, at+k+"."); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		for k, v := range obj {
			if err := oldExactKeys(v, t.Elem(), at+k+"."); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		arr, ok := doc.([]any)
		if !ok {
			return nil
		}
		for _, v := range arr {
			if err := oldExactKeys(v, t.Elem(), at); err != nil {
				return err
			}
		}
	}
	return nil
}

func oldDecodeWorkerRequest(b []byte) (*WorkerRequest, error) {
	if _, err := oldAdmit(WorkerRequestSchema(), b); err != nil {
		return nil, err
	}
	var r WorkerRequest
	if err := oldDecodeStrict(b, &r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

func oldDecodeWorkerResponse(b []byte) (*WorkerResponse, error) {
	if err := oldCheckShape(b, WorkerResponseLimits()); err != nil {
		return nil, err
	}
	var r WorkerResponse
	if err := oldDecodeStrict(b, &r); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &r, nil
}

func oldDecodeLauncherRequest(b []byte) (*LauncherRequest, error) {
	if _, err := oldAdmit(LauncherRequestSchema(), b); err != nil {
		return nil, err
	}
	var r LauncherRequest
	if err := oldDecodeStrict(b, &r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

func oldDecodeLauncherResponse(b []byte) (*LauncherResponse, error) {
	if _, err := oldAdmit(LauncherResponseSchema(), b); err != nil {
		return nil, err
	}
	var r LauncherResponse
	if err := oldDecodeStrict(b, &r); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &r, nil
}

// sameAnswer fails unless the decoder and its oracle gave the same code
// and, when both admitted, the same value.
func sameAnswer[T any](t *testing.T, in []byte, got T, err error, want T, wantErr error) {
	t.Helper()
	if codeOf(err) != codeOf(wantErr) {
		t.Fatalf("%q: %q (%v), oracle %q (%v)", in, codeOf(err), err, codeOf(wantErr), wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decoded %+v, oracle %+v", in, got, want)
	}
}

// hasRepeatedKey reports whether the first JSON value of b holds an object
// that repeats a key (as decoded).
func hasRepeatedKey(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type level struct {
		keys    map[string]bool
		wantKey bool
	}
	var stack []*level
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n := len(stack); n > 0 && stack[n-1] != nil && stack[n-1].wantKey {
			if k, ok := tok.(string); ok {
				if stack[n-1].keys[k] {
					return true
				}
				stack[n-1].keys[k] = true
				stack[n-1].wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{keys: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, nil)
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			return false
		}
		if top := stack[len(stack)-1]; top != nil {
			top.wantKey = true
		}
	}
}

// Types beside the wire's for FuzzDecodeStrict: embedded structs (one
// shadowed, one in conflict, which only the typed decode refuses), a
// recursive type, a map, an array, an Unmarshaler, an interface, and the
// tags jsonFields skips or keeps.
type strictInner struct {
	B    int          `json:"b"`
	Next *strictInner `json:"next,omitempty"`
}

type strictShadow struct {
	A int `json:"a"`
	Z int `json:"z"`
}

type strictOne struct{ X int }
type strictTwo struct{ X int }

type strictOuter struct {
	strictInner
	*strictShadow
	strictOne
	strictTwo
	A      string                 `json:"a"`
	M      map[string]strictInner `json:"m"`
	L      []strictInner          `json:"l"`
	Arr    [2]strictInner         `json:"arr"`
	Raw    json.RawMessage        `json:"raw"`
	Any    any                    `json:"any"`
	T      *time.Time             `json:"t"`
	Skip   int                    `json:"-"`
	Dash   int                    `json:"-,"`
	Plain  int
	Keyed  map[int]map[string]bool `json:"keyed"`
	hidden int
}

func strictTargets() []func() any {
	return []func() any{
		func() any { return new(WorkerRequest) },
		func() any { return new(WorkerResponse) },
		func() any { return new(LauncherRequest) },
		func() any { return new(LauncherResponse) },
		func() any { return new(strictOuter) },
		func() any { return new([]map[string]*ResourceLimits) },
		func() any { return new(any) },
		func() any { return new(string) },
	}
}

// FuzzDecodeStrict holds DecodeStrict to the generic-decode walk it
// replaced, on any input and for several types. The one intended
// difference: a key repeated in one object (which CheckShape refuses, but
// DecodeStrict alone reads as encoding/json does) used to have only its
// last occurrence held to exact names, though encoding/json decodes every
// occurrence, case folding included; every occurrence is held now, so such
// a document may be refused unknown_field where the oracle admitted it or
// answered invalid_field.
func FuzzDecodeStrict(f *testing.F) {
	f.Add([]byte(`{"a":"x","b":1,"next":{"b":2},"m":{"k":{"b":3}},"l":[{"b":4}],"arr":[{},{"b":5}],"raw":{"Any":1},"any":{"K":[1]},"t":"2026-01-02T03:04:05Z","-":1,"Plain":2,"keyed":{"1":{"x":true}},"z":9}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, mk := range strictTargets() {
			got, want := mk(), mk()
			err, wantErr := DecodeStrict(in, got), oldDecodeStrict(in, want)
			if codeOf(err) != codeOf(wantErr) {
				if codeOf(err) == CodeUnknownField && (wantErr == nil || codeOf(wantErr) == CodeInvalidField) && hasRepeatedKey(in) {
					continue
				}
				t.Fatalf("%T %q: %q (%v), oracle %q (%v)", got, in, codeOf(err), err, codeOf(wantErr), wantErr)
			}
			if err != nil {
				wantCatalogued(t, err)
			} else if !reflect.DeepEqual(got, want) {
				t.Fatalf("%T %q: decoded %+v, oracle %+v", got, in, got, want)
			}
		}
	})
}

func TestDecodeStrictAgreesWithOracle(t *testing.T) {
	docs := append([]string{}, shapeCases...)
	docs = append(docs,
		`[]`, `[{"b":1},{"B":1}]`, `"x"`, `1x`, `{"a":1}garbage`, `{"a":1}{`, ` {"b":1} `,
		`{"b":1,"B":2}`, `{"next":{"next":{"NEXT":{}}}}`, `{"m":{"K":{"b":1,"c":1}}}`, `{"l":[{"b":1},{"ß":1}]}`,
		`{"arr":[{},{},{"b":1}]}`, `{"X":1}`, `{"x":1}`, `{"strictInner":{}}`, `{"Dash":1}`, `{"-":1}`,
		`{"Skip":1}`, `{"hidden":1}`, `{"z":1}`, `{"Z":1}`, `{"t":"2026-01-02T03:04:05Z"}`, `{"t":{"X":1}}`,
		`{"keyed":{"x":{}}}`, `{"keyed":{"1":{"A":true}}}`, `{"raw":{"A":1},"any":{"A":[{"B":1}]}}`,
		`{"b":"1","BB":1}`, `{"l":{"B":1}}`, `{"m":[{"B":1}]}`, `{"b":99999999999999999999999}`,
		strings.Repeat("[", maxNesting)+strings.Repeat("]", maxNesting),
		strings.Repeat("[", maxNesting+1)+strings.Repeat("]", maxNesting+1),
		strings.Repeat(`{"next":`, maxNesting)+"{}"+strings.Repeat("}", maxNesting),
		`{"protocol":1,"request_id":"r","ok":true,"result":{"ID":"x"}}`,
		`{"protocol":1,"action":"create","limits":{"pids":1,"PIDS":9}}`,
		`{"protocol":1,"action":"create","limits":{"\u0070ids":1}}`,
		`{"protocol":1,"action":"create","seccomp":{"ſha256":""}}`,
		"{\"protocol\":1,\"action\":\"create\",\"limits\":{\"\u212anofile\":1}}",
	)
	for _, doc := range docs {
		for _, mk := range strictTargets() {
			got, want := mk(), mk()
			err, wantErr := DecodeStrict([]byte(doc), got), oldDecodeStrict([]byte(doc), want)
			if codeOf(err) != codeOf(wantErr) || err == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("%T %.80q: %v, oracle %v", got, doc, err, wantErr)
			}
		}
	}
}

// TestDecodeStrictRepeatedKey is the one answer that changed: a case-folded
// key in an earlier occurrence of a repeated key is refused, as it is when
// the key is not repeated; the oracle checked only the last occurrence and
// let encoding/json's case folding set the field from the earlier one.
func TestDecodeStrictRepeatedKey(t *testing.T) {
	doc := []byte(`{"protocol":1,"action":"create","limits":{"PIDS":9},"limits":{}}`)
	var old LauncherRequest
	if err := oldDecodeStrict(doc, &old); err != nil || old.Limits.Pids != 9 {
		t.Fatalf("oracle: %v, %+v", err, old.Limits)
	}
	wantCode(t, DecodeStrict(doc, new(LauncherRequest)), CodeUnknownField)
	if !hasRepeatedKey(doc) || hasRepeatedKey([]byte(`{"a":{"b":1},"c":{"b":1}}`)) {
		t.Fatal("hasRepeatedKey")
	}
}

// TestDecodeStrictConflictingEmbedded: a name two embedded structs at one
// depth declare is not a field to encoding/json; jsonFields keeps the
// first, so the typed decode's unknown-field rule is what refuses it.
func TestDecodeStrictConflictingEmbedded(t *testing.T) {
	wantCode(t, DecodeStrict([]byte(`{"X":1}`), new(strictOuter)), CodeUnknownField)
	wantCode(t, oldDecodeStrict([]byte(`{"X":1}`), new(strictOuter)), CodeUnknownField)
}

// TestDecodeStrictNesting: encoding/json refuses nesting deeper than
// 10000 as a syntax error, and so does the walk, before the typed decode.
func TestDecodeStrictNesting(t *testing.T) {
	for _, depth := range []int{maxNesting, maxNesting + 1} {
		doc := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		var v any
		err := DecodeStrict(doc, &v)
		if want := depth > maxNesting; (codeOf(err) == CodeMalformedJSON) != want || !want && err != nil {
			t.Errorf("depth %d: %v", depth, err)
		}
	}
}

func TestDecodeStrictUnknownFieldNamesThePath(t *testing.T) {
	err := DecodeStrict([]byte(`{"l":[{"b":1},{"next":{"B":1}}]}`), new(strictOuter))
	if codeOf(err) != CodeUnknownField || !strings.HasSuffix(err.Error(), strconv.Quote("l.next.B")) {
		t.Fatal(err)
	}
}

// TestKeyCheckClosed: the wire types take the one-pass typed decode
// (json.Unmarshal; the walk alone refuses unknown fields); a type whose
// encoding/json fields may differ from jsonFields keeps the Decoder's
// unknown-field rule.
func TestKeyCheckClosed(t *testing.T) {
	for _, v := range []any{new(WorkerRequest), new(WorkerResponse), new(LauncherRequest), new(LauncherResponse), new([]map[string]*ResourceLimits)} {
		if c := keyCheckOf(reflect.TypeOf(v)); c == nil || !c.closed {
			t.Errorf("%T: not closed", v)
		}
	}
	type tagged struct {
		A int `json:"a b"`
	}
	// Two fields of one name, which vet would refuse as a literal.
	twice := reflect.StructOf([]reflect.StructField{
		{Name: "A", Type: reflect.TypeFor[int](), Tag: `json:"x"`},
		{Name: "B", Type: reflect.TypeFor[int](), Tag: `json:"x"`},
	})
	type holds struct {
		L []any `json:"l"`
	}
	for _, v := range []any{new(strictOuter), new(map[string]any), new(tagged), reflect.New(twice).Interface(), new(holds), new([]strictOuter)} {
		if c := keyCheckOf(reflect.TypeOf(v)); c == nil || c.closed {
			t.Errorf("%T: closed", v)
		}
	}
}
