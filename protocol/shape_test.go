package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// tokenWalk is the reference CheckShape is held to: the walk over
// encoding/json's Decoder.Token that CheckShape was before the relay
// needed it fast. FuzzCheckShape requires the same verdict from both.
func tokenWalk(b []byte, lim Limits) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type level struct {
		keys     map[string]struct{}
		isObject bool
		wantKey  bool
	}
	tok, err := dec.Token()
	if err != nil {
		return Errorf(CodeMalformedJSON, "%w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Errorf(CodeMalformedJSON, "top level is not an object")
	}
	stack := []level{{keys: map[string]struct{}{}, isObject: true, wantKey: true}}
	nodes := 1
	valueEnded := func() {
		if n := len(stack); n > 0 && stack[n-1].isObject {
			stack[n-1].wantKey = true
		}
	}
	for len(stack) > 0 {
		tok, err := dec.Token()
		if err != nil {
			return Errorf(CodeMalformedJSON, "%w", err)
		}
		top := len(stack) - 1
		if stack[top].isObject && stack[top].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:top]
				valueEnded()
				continue
			}
			key, ok := tok.(string)
			if !ok {
				return E(CodeMalformedJSON)
			}
			if _, dup := stack[top].keys[key]; dup {
				return Errorf(CodeDuplicateKey, "%q", key)
			}
			stack[top].keys[key] = struct{}{}
			stack[top].wantKey = false
			continue
		}
		if d, ok := tok.(json.Delim); ok && d == ']' {
			stack = stack[:top]
			valueEnded()
			continue
		}
		nodes++
		if nodes > lim.MaxNodes {
			return E(CodeTooManyNodes)
		}
		if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
			if len(stack)+1 > lim.MaxDepth {
				return E(CodeTooDeep)
			}
			stack = append(stack, level{keys: map[string]struct{}{}, isObject: d == '{', wantKey: d == '{'})
			continue
		}
		valueEnded()
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return E(CodeTrailingData)
	}
	return nil
}

func TestCheckShapeAgreesWithTokenWalk(t *testing.T) {
	lim := Limits{MaxDepth: 4, MaxNodes: 16}
	for _, doc := range shapeCases {
		got, want := CheckShape([]byte(doc), lim), tokenWalk([]byte(doc), lim)
		if gc, wc := codeOf(got), codeOf(want); gc != wc {
			t.Errorf("%q: CheckShape %v, Token walk %v", doc, got, want)
		}
		if old := oldCheckShape([]byte(doc), lim); fmt.Sprint(got) != fmt.Sprint(old) {
			t.Errorf("%q: CheckShape %v, before %v", doc, got, old)
		}
	}
}

// shapeCases cover each grammar rule and each refusal in both orders.
var shapeCases = []string{
	``, ` `, `{`, `}`, `[]`, `1`, `"a"`, `null`, `x`, `{}`, ` {} `, `{}x`, `{} {}`, `{}]`, `{}}`,
	`{"a":1}`, `{"a":1,}`, `{,}`, `{"a" 1}`, `{"a":}`, `{"a":1 "b":2}`, `{"a":1,"a":2}`,
	`{"a":{"b":1,"b":2}}`, `{"a":[{"b":1},{"b":1,"b":2}]}`, `{"a":1,"\u0061":2}`, `{"\u00e9":1,"é":2}`,
	`{"\ud800":1,"\udfff":2}`, "{\"\xff\":1,\"\xfe\":2}", "{\"\xff\":1}", `{"a\"":1,"a\\":2}`,
	`{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1,,2]}`, `{"a":[1 2]}`, `{"a":[]}`, `{"a":[[]]}`, `{"a":[[[[]]]]}`,
	`{"a":{"b":{"c":{}}}}`, `{"a":{"b":{"c":{"d":1}}}}`, `{"a":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}`,
	`{"a":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,x]}`, `{"a":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,{}]}`,
	`{"a":01}`, `{"a":-}`, `{"a":-0}`, `{"a":1.}`, `{"a":1.5e}`, `{"a":1.5e+7}`, `{"a":1E-0}`, `{"a":.5}`,
	`{"a":+1}`, `{"a":1e3x}`, `{"a":tru}`, `{"a":true}`, `{"a":truex}`, `{"a":nul}`, `{"a":false}`,
	`{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`, "{\"a\":\"\t\"}", "{\"a\":\"\x00\"}", `{"a":"\/\b\f\n\r\t"}`,
	`{"a":"`, `{"a`, `{"a":"b\`, `{"a":[`, `{"a":{`, `{"a":{"b"`, `{"a":1,"a"`, `{1:2}`, `{"a":1}  ` + "\n\t\r",
	`{"a":[1,{"b":2,"c":[3,{"b":4,"b":5}]}]}`, `{"":1,"":2}`, `{"a":{"":1},"":2}`,
}

func codeOf(err error) Code {
	if err == nil {
		return ""
	}
	return AsWire(err).Code
}

func TestCheckShapeNamesThePath(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		code Code
		path string
	}{
		{`{"a":1,"a":2}`, CodeDuplicateKey, `"a"`},
		{`{"syscalls":[{"names":["read"]},{"action":1,"action":2}]}`, CodeDuplicateKey, `"syscalls[1].action"`},
		{`{"a":{"b":[0,[1,{"c":1,"\u0063":2}]]}}`, CodeDuplicateKey, `"a.b[1][1].c"`},
		{`{"store":{"url":"x","url":"y"}}`, CodeDuplicateKey, `"store.url"`},
		{`{"a":[1,2,x]}`, CodeMalformedJSON, `at a[2]: invalid character 'x' looking for beginning of value (offset 10)`},
		{`{"a":{"b":tru}}`, CodeMalformedJSON, `at a.b: invalid character '}' in literal true (offset 13)`},
		{`[]`, CodeMalformedJSON, `top level is not an object`},
	} {
		err := CheckShape([]byte(tc.doc), Limits{MaxDepth: 8, MaxNodes: 64})
		var se *ShapeError
		if codeOf(err) != tc.code || (tc.code != CodeMalformedJSON || !strings.Contains(tc.path, "top level")) && !errors.As(err, &se) {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		if !strings.HasSuffix(err.Error(), ": "+tc.path) {
			t.Errorf("%s: error %q does not end with %s", tc.doc, err, tc.path)
		}
	}
}

// TestCheckShapeLargeObjects crosses the linear-to-map switch of the
// duplicate check: the repeat is found whichever side of it the keys are.
func TestCheckShapeLargeObjects(t *testing.T) {
	obj := func(keys ...string) string {
		var b strings.Builder
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"` + k + `":{"x":1}`)
		}
		return b.String() + "}"
	}
	var keys []string
	for i := range 3 * smallObject {
		keys = append(keys, strings.Repeat("k", i+1))
	}
	lim := Limits{MaxDepth: 4, MaxNodes: 1 << 10}
	if err := CheckShape([]byte(obj(keys...)), lim); err != nil {
		t.Fatal(err)
	}
	for _, dup := range []int{0, smallObject - 1, smallObject, 2*smallObject + 3} {
		for _, at := range []int{smallObject - 1, smallObject, 3*smallObject - 1} {
			ks := append(append([]string{}, keys[:at+1]...), keys[dup])
			ks = append(ks, keys[at+1:]...)
			if dup > at {
				continue
			}
			if err := CheckShape([]byte(obj(ks...)), lim); codeOf(err) != CodeDuplicateKey {
				t.Errorf("key %d repeated after key %d: %v", dup, at, err)
			}
		}
	}
	// A reused stack level forgets the keys of the object it held before.
	again := `{"a":[` + obj(keys...) + `,` + obj(keys...) + `]}`
	if err := CheckShape([]byte(again), Limits{MaxDepth: 4, MaxNodes: 1 << 10}); err != nil {
		t.Fatal(err)
	}
}

// relayBody is an inference request of about 16 MiB (the relay's default
// max_request_bytes): many messages, each with nested tool calls.
func relayBody() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	for i := 0; b.Len() < 16<<20-256; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor sit amet ", 20) +
			`","tool_calls":[{"id":"call_1","type":"function","function":{"name":"shell","arguments":"{\"cmd\":[\"ls\",\"-l\"]}"}}]}`)
	}
	b.WriteString(`],"max_tokens":16,"stream":true}`)
	return []byte(b.String())
}

// BenchmarkCheckShape16MiB is the cost the relay pays per maximal body; the
// scanner before it also served Admit and DecodeStrict, and the Token walk
// before that, are beside it.
func BenchmarkCheckShape16MiB(b *testing.B) {
	body := relayBody()
	lim := Limits{MaxDepth: 64, MaxNodes: len(body) + 1}
	for _, impl := range []struct {
		name  string
		check func([]byte, Limits) error
	}{{"scanner", CheckShape}, {"scanner-before", oldCheckShape}, {"token-walk", tokenWalk}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := impl.check(body, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckShapeFrame is the per-frame cost: a worker's prepare
// request of about 600 bytes, as the broker admits thousands.
func BenchmarkCheckShapeFrame(b *testing.B) {
	frame := []byte(`{"protocol":1,"action":"prepare","request_id":"0192f0a0-0000-7000-8000-000000000001","epoch":3,` +
		`"lease_id":"0192f0a0-0000-7000-8000-000000000002","kind":"git_commit","target_id":"repo",` +
		`"target":{"base_oid":"2f7c9d0e4b1a5c3d8e6f7a9b0c1d2e3f4a5b6c7d","ref":"refs/heads/main","message":"fix the off-by-one in calc"},` +
		`"payload_b64":"ZGlmZiAtLWdpdCBhL3NyYy9jYWxjLnNoIGIvc3JjL2NhbGMuc2gKaW5kZXggMWEyYjNjNC4uNWQ2ZTdmOCAxMDA2NDQKLS0tIGEvc3JjL2NhbGMuc2gKKysrIGIvc3JjL2NhbGMuc2gK",` +
		`"intent":{"summary":"fix calc","paths":["src/calc.sh"],"tests":["make test"]}}`)
	lim := WorkerRequestSchema().Limits
	for _, impl := range []struct {
		name  string
		check func([]byte, Limits) error
	}{{"scanner", CheckShape}, {"scanner-before", oldCheckShape}, {"token-walk", tokenWalk}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if err := impl.check(frame, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
