package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// validCreate is a create request with every field set, as a map so a case
// can change one thing.
func validCreate() map[string]any {
	return map[string]any{
		"protocol":      1,
		"action":        "create",
		"request_id":    "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		"domain_id":     "dom-1",
		"generation":    1,
		"workspace_id":  "ws-1",
		"checkpoint":    strings.Repeat("ab", 32),
		"broker_socket": "broker-1",
		"relay_socket":  "relay-1",
		"egress_socket": "egress-1",
		"rootfs":        "agents",
		"argv":          []string{"/bin/sh", "-c", "make test"},
		"env":           map[string]string{"LANG": "C.UTF-8", "GOFLAGS": "-mod=vendor"},
		"cwd":           "/workspace/src",
		"limits":        map[string]any{"pids": 64, "memory_bytes": 1 << 30, "cpu_millis": 1000, "nproc": 64, "nofile": 256},
		"seccomp":       NewSeccompProgram(make([]byte, 16)),
		"one_shot":      true,
	}
}

func minimal(action string) map[string]any {
	m := map[string]any{"protocol": 1, "action": action, "request_id": "r-1"}
	switch action {
	case ActionPreflight:
	case ActionCreate:
		m["domain_id"], m["generation"], m["workspace_id"], m["argv"] = "d", 1, "w", []string{"/bin/true"}
	default:
		m["domain_id"] = "d"
	}
	return m
}

func with(m map[string]any, kv ...any) map[string]any {
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func without(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		delete(m, k)
	}
	return m
}

func js(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nest returns an object nested depth levels deep (depth 1 is "{}").
func nest(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

func TestCheckShape(t *testing.T) {
	lim := Limits{MaxDepth: 3, MaxNodes: 6}
	cases := []struct {
		name string
		doc  string
		code Code // "" = admitted
	}{
		{"empty object", `{}`, ""},
		{"depth at limit", nest(3), ""},
		{"depth over limit", nest(4), CodeTooDeep},
		{"array depth over limit", `{"a":[[[]]]}`, CodeTooDeep},
		{"array depth at limit", `{"a":[[]]}`, ""},
		{"nodes at limit", `{"a":1,"b":2,"c":3,"d":4,"e":5}`, ""},
		{"nodes over limit", `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6}`, CodeTooManyNodes},
		{"array elements count", `{"a":[1,2,3,4,5]}`, CodeTooManyNodes},
		{"duplicate top-level key", `{"a":1,"a":2}`, CodeDuplicateKey},
		{"duplicate nested key", `{"a":{"b":1,"b":1}}`, CodeDuplicateKey},
		{"duplicate key in array element", `{"a":[{"b":1,"b":1}]}`, CodeDuplicateKey},
		{"duplicate via escape", `{"a":1,"\u0061":2}`, CodeDuplicateKey},
		{"same key in sibling objects", `{"a":{"b":1},"c":{"b":1}}`, ""},
		{"top-level array", `[{}]`, CodeMalformedJSON},
		{"top-level string", `"x"`, CodeMalformedJSON},
		{"top-level number", `1`, CodeMalformedJSON},
		{"top-level null", `null`, CodeMalformedJSON},
		{"empty document", ``, CodeMalformedJSON},
		{"whitespace only", "  \n", CodeMalformedJSON},
		{"unterminated", `{"a":1`, CodeMalformedJSON},
		{"missing colon", `{"a" 1}`, CodeMalformedJSON},
		{"trailing comma", `{"a":1,}`, CodeMalformedJSON},
		{"single quotes", `{'a':1}`, CodeMalformedJSON},
		{"leading zero", `{"a":01}`, CodeMalformedJSON},
		{"NaN", `{"a":NaN}`, CodeMalformedJSON},
		{"comment", `{"a":1 /* x */}`, CodeMalformedJSON},
		{"byte order mark", "\ufeff{}", CodeMalformedJSON},
		{"trailing object", `{}{}`, CodeTrailingData},
		{"trailing garbage", `{} x`, CodeTrailingData},
		{"trailing brace", `{}}`, CodeTrailingData},
		{"trailing NUL", "{}\x00", CodeTrailingData},
		{"trailing whitespace", "{} \t\r\n", ""},
		{"leading whitespace", " \n{}", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckShape([]byte(tc.doc), lim)
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, tc.code)
		})
	}
}

func TestAdmitLauncherRequest(t *testing.T) {
	s := LauncherRequestSchema()
	raw := func(s string) func(testing.TB) []byte { return func(testing.TB) []byte { return []byte(s) } }
	doc := func(m map[string]any) func(testing.TB) []byte { return func(t testing.TB) []byte { return js(t, m) } }
	deep := func(t testing.TB) []byte {
		return []byte(`{"protocol":1,"action":"create","request_id":"r","limits":` + nest(4) + `}`)
	}
	wide := func(t testing.TB) []byte {
		argv := make([]string, 1100)
		for i := range argv {
			argv[i] = "x"
		}
		return js(t, with(minimal("create"), "argv", argv))
	}
	cases := []struct {
		name string
		doc  func(testing.TB) []byte
		code Code
		kind string
	}{
		{"full create", doc(validCreate()), "", "create"},
		{"preflight", doc(minimal("preflight")), "", "preflight"},
		{"freeze", doc(minimal("freeze")), "", "freeze"},
		{"thaw", doc(minimal("thaw")), "", "thaw"},
		{"checkpoint", doc(minimal("checkpoint")), "", "checkpoint"},
		{"destroy", doc(minimal("destroy")), "", "destroy"},
		{"inspect", doc(minimal("inspect")), "", "inspect"},
		{"trailing whitespace", func(t testing.TB) []byte { return append(js(t, minimal("preflight")), " \n\t\r"...) }, "", "preflight"},

		{"not UTF-8", raw("{\"protocol\":1,\"action\":\"preflight\",\"request_id\":\"r\xff\"}"), CodeNotUTF8, ""},
		{"not UTF-8 before malformed", raw("\xc0\xaf"), CodeNotUTF8, ""},
		{"not an object", raw(`"preflight"`), CodeMalformedJSON, ""},
		{"top-level array", raw(`[{"protocol":1,"action":"preflight","request_id":"r"}]`), CodeMalformedJSON, ""},
		{"duplicate top-level key", raw(`{"protocol":1,"action":"inspect","request_id":"r","domain_id":"a","domain_id":"b"}`), CodeDuplicateKey, ""},
		{"duplicate protocol", raw(`{"protocol":2,"protocol":1,"action":"preflight","request_id":"r"}`), CodeDuplicateKey, ""},
		{"duplicate nested key", raw(`{"protocol":1,"action":"create","request_id":"r","domain_id":"d","generation":1,"workspace_id":"w","argv":["x"],"limits":{"pids":1,"pids":999}}`), CodeDuplicateKey, ""},
		{"too deep", deep, CodeTooDeep, ""},
		{"too many nodes", wide, CodeTooManyNodes, ""},
		{"trailing data", raw(`{"protocol":1,"action":"preflight","request_id":"r"} {}`), CodeTrailingData, ""},
		{"trailing garbage", raw(`{"protocol":1,"action":"preflight","request_id":"r"}garbage`), CodeTrailingData, ""},

		{"protocol missing", doc(without(minimal("preflight"), "protocol")), CodeMissingField, ""},
		{"protocol string", doc(with(minimal("preflight"), "protocol", "1")), CodeInvalidField, ""},
		{"protocol float", raw(`{"protocol":1.0,"action":"preflight","request_id":"r"}`), CodeInvalidField, ""},
		{"protocol exponent", raw(`{"protocol":1e0,"action":"preflight","request_id":"r"}`), CodeInvalidField, ""},
		{"protocol bool", doc(with(minimal("preflight"), "protocol", true)), CodeInvalidField, ""},
		{"protocol null", doc(with(minimal("preflight"), "protocol", nil)), CodeInvalidField, ""},
		{"protocol object", doc(with(minimal("preflight"), "protocol", map[string]any{"v": 1})), CodeInvalidField, ""},
		{"protocol negative", doc(with(minimal("preflight"), "protocol", -1)), CodeUnsupportedVersion, ""},
		{"protocol minus zero", raw(`{"protocol":-0,"action":"preflight","request_id":"r"}`), CodeUnsupportedVersion, ""},
		{"protocol zero", doc(with(minimal("preflight"), "protocol", 0)), CodeUnsupportedVersion, ""},
		{"protocol 4", doc(with(minimal("preflight"), "protocol", 4)), CodeUnsupportedVersion, ""},
		{"protocol huge", raw(`{"protocol":99999999999999999999999999,"action":"preflight","request_id":"r"}`), CodeUnsupportedVersion, ""},
		{"protocol max int64+1", raw(`{"protocol":9223372036854775808,"action":"preflight","request_id":"r"}`), CodeUnsupportedVersion, ""},
		{"unsupported version checked before action", raw(`{"protocol":7,"action":"no-such","request_id":"r","junk":1}`), CodeUnsupportedVersion, ""},

		{"action missing", doc(without(minimal("preflight"), "action")), CodeMissingField, ""},
		{"action number", doc(with(minimal("preflight"), "action", 1)), CodeInvalidField, ""},
		{"action null", doc(with(minimal("preflight"), "action", nil)), CodeInvalidField, ""},
		{"action array", doc(with(minimal("preflight"), "action", []string{"preflight"})), CodeInvalidField, ""},
		{"action unknown", doc(with(minimal("preflight"), "action", "exec")), CodeUnknownAction, ""},
		{"action wrong case", doc(with(minimal("preflight"), "action", "Preflight")), CodeUnknownAction, ""},
		{"action restore is not an action", doc(with(minimal("create"), "action", "restore")), CodeUnknownAction, ""},

		{"unknown field", doc(with(minimal("preflight"), "privileged", true)), CodeUnknownField, ""},
		{"field of another action", doc(with(minimal("preflight"), "domain_id", "d")), CodeUnknownField, ""},
		{"argv on destroy", doc(with(minimal("destroy"), "argv", []string{"x"})), CodeUnknownField, ""},
		{"field name wrong case", doc(with(minimal("inspect"), "Domain_ID", "d")), CodeUnknownField, ""},
		{"empty field name", doc(with(minimal("preflight"), "", 1)), CodeUnknownField, ""},
		{"unknown field before missing field", doc(with(without(minimal("create"), "argv"), "x", 1)), CodeUnknownField, ""},

		{"request_id missing", doc(without(minimal("preflight"), "request_id")), CodeMissingField, ""},
		{"domain_id missing", doc(without(minimal("freeze"), "domain_id")), CodeMissingField, ""},
		{"generation missing", doc(without(minimal("create"), "generation")), CodeMissingField, ""},
		{"workspace_id missing", doc(without(minimal("create"), "workspace_id")), CodeMissingField, ""},
		{"argv missing", doc(without(minimal("create"), "argv")), CodeMissingField, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := s.Admit(tc.doc(t))
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				if a.Kind != tc.kind || !slices.Contains(LauncherVersions(), a.Version) {
					t.Fatalf("admission %+v", a)
				}
				return
			}
			wantCode(t, err, tc.code)
		})
	}
}

func TestSchemaRequiredAreAllowed(t *testing.T) {
	for _, s := range []*Schema{LauncherRequestSchema(), LauncherResponseSchema()} {
		for kind, f := range s.Kinds {
			for _, r := range f.Required {
				if contains(f.Optional, r) {
					t.Errorf("%s: %q both required and optional", kind, r)
				}
			}
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestDecodeStrict(t *testing.T) {
	create := func(kv ...any) []byte { return js(t, with(minimal("create"), kv...)) }
	cases := []struct {
		name string
		doc  []byte
		code Code
	}{
		{"nested unknown field in limits", create("limits", map[string]any{"pids": 1, "swap": 2}), CodeUnknownField},
		{"nested unknown field in seccomp", create("seccomp", map[string]any{"program_b64": "AAAAAAAAAAA=", "sha256": strings.Repeat("0", 64), "flags": 1}), CodeUnknownField},
		{"nested field wrong case", create("limits", map[string]any{"PIDS": 1}), CodeUnknownField},
		{"nested case-variant duplicate", []byte(`{"protocol":1,"action":"create","request_id":"r","domain_id":"d","generation":1,"workspace_id":"w","argv":["x"],"limits":{"pids":1,"Pids":99999}}`), CodeUnknownField},
		{"nested unicode case fold", []byte(`{"protocol":1,"action":"create","request_id":"r","domain_id":"d","generation":1,"workspace_id":"w","argv":["x"],"seccomp":{"program_b64":"AAAAAAAAAAA=","ſha256":"x"}}`), CodeUnknownField},
		{"generation string", create("generation", "1"), CodeInvalidField},
		{"generation float", create("generation", 1.5), CodeInvalidField},
		{"generation 1.0", []byte(`{"protocol":1,"action":"create","request_id":"r","domain_id":"d","generation":1.0,"workspace_id":"w","argv":["x"]}`), CodeInvalidField},
		{"generation 1e0", []byte(`{"protocol":1,"action":"create","request_id":"r","domain_id":"d","generation":1e0,"workspace_id":"w","argv":["x"]}`), CodeInvalidField},
		{"generation overflow", []byte(`{"protocol":1,"action":"create","request_id":"r","domain_id":"d","generation":99999999999999999999,"workspace_id":"w","argv":["x"]}`), CodeInvalidField},
		{"argv string", create("argv", "/bin/true"), CodeInvalidField},
		{"argv of numbers", create("argv", []int{1}), CodeInvalidField},
		{"env array", create("env", []string{"A=B"}), CodeInvalidField},
		{"env value number", create("env", map[string]any{"A": 1}), CodeInvalidField},
		{"limits negative", create("limits", map[string]any{"pids": -1}), CodeInvalidField},
		{"limits string", create("limits", "max"), CodeInvalidField},
		{"one_shot string", create("one_shot", "true"), CodeInvalidField},
		{"seccomp string", create("seccomp", "AAAA"), CodeInvalidField},
		{"domain_id number", js(t, with(minimal("inspect"), "domain_id", 7)), CodeInvalidField},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeLauncherRequest(tc.doc)
			wantCode(t, err, tc.code)
		})
	}
}

func TestDecodeStrictEmbedded(t *testing.T) {
	type inner struct {
		B int `json:"b"`
	}
	type outer struct {
		inner
		A   int            `json:"a"`
		M   map[string]any `json:"m"`
		Raw json.RawMessage
	}
	var v outer
	if err := DecodeStrict([]byte(`{"a":1,"b":2,"m":{"Any":{"K":1}},"Raw":{"X":1}}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != 1 || v.B != 2 {
		t.Fatalf("%+v", v)
	}
	for _, d := range []string{`{"A":1}`, `{"B":1}`, `{"inner":{}}`, `{"raw":{}}`} {
		wantCode(t, DecodeStrict([]byte(d), &v), CodeUnknownField)
	}
}

func ExampleSchema_Admit() {
	_, err := LauncherRequestSchema().Admit([]byte(`{"protocol":4,"action":"preflight","request_id":"r"}`))
	fmt.Println(AsWire(err).Code)
	// Output: unsupported_version
}

// README §3: null decodes as the zero value and is then judged by the value
// rules, so it fails a required field and means "absent" for an optional one.
func TestNullIsTheZeroValue(t *testing.T) {
	for _, field := range []string{"request_id", "domain_id", "generation", "workspace_id", "argv"} {
		t.Run("required "+field, func(t *testing.T) {
			_, err := DecodeLauncherRequest(js(t, with(minimal("create"), field, nil)))
			wantCode(t, err, CodeInvalidField)
		})
	}
	for _, field := range []string{"checkpoint", "broker_socket", "relay_socket", "egress_socket", "rootfs", "env", "cwd", "limits", "seccomp", "one_shot"} {
		t.Run("optional "+field, func(t *testing.T) {
			r, err := DecodeLauncherRequest(js(t, with(minimal("create"), field, nil)))
			if err != nil {
				t.Fatal(err)
			}
			absent, err := DecodeLauncherRequest(js(t, minimal("create")))
			if err != nil {
				t.Fatal(err)
			}
			if a, b := js(t, r), js(t, absent); string(a) != string(b) {
				t.Fatalf("null differs from absent:\n%s\n%s", a, b)
			}
		})
	}
}
