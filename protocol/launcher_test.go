package protocol

import (
	"bytes"
	"encoding/base64"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeLauncherRequestRoundTrip(t *testing.T) {
	for _, m := range []map[string]any{validCreate(), minimal("preflight"), minimal("create"), minimal("destroy")} {
		b := js(t, m)
		r, err := DecodeLauncherRequest(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		again, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := DecodeLauncherRequest(again)
		if err != nil {
			t.Fatalf("re-encoded request refused: %s: %v", again, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", r, r2)
		}
	}
}

func TestValidate(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	prog8 := make([]byte, 8)
	good := NewSeccompProgram(prog8)
	cases := []struct {
		name   string
		mutate func(r *LauncherRequest)
		code   Code // "" = valid
	}{
		{"valid", func(*LauncherRequest) {}, ""},
		{"unknown action", func(r *LauncherRequest) { r.Action = "exec" }, CodeUnknownAction},
		{"release v2", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 2, Action: ActionRelease, RequestID: "r", DomainID: "d", Checkpoint: strings.Repeat("ab", 32)}
		}, ""},
		{"release v1", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 1, Action: ActionRelease, RequestID: "r", DomainID: "d", Checkpoint: strings.Repeat("ab", 32)}
		}, CodeUnsupportedVersion},
		{"release bad digest", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 2, Action: ActionRelease, RequestID: "r", DomainID: "d", Checkpoint: "../x"}
		}, CodeInvalidField},
		{"release no digest", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 2, Action: ActionRelease, RequestID: "r", DomainID: "d"}
		}, CodeInvalidField},
		{"release v3", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 3, Action: ActionRelease, RequestID: "r", DomainID: "d", Checkpoint: strings.Repeat("ab", 32)}
		}, ""},
		{"import v3", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 3, Action: ActionImport, RequestID: "r", DomainID: "d", Checkpoint: strings.Repeat("ab", 32)}
		}, ""},
		{"import v2", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 2, Action: ActionImport, RequestID: "r", DomainID: "d", Checkpoint: strings.Repeat("ab", 32)}
		}, CodeUnsupportedVersion},
		{"import v1", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 1, Action: ActionImport, RequestID: "r", DomainID: "d", Checkpoint: strings.Repeat("ab", 32)}
		}, CodeUnsupportedVersion},
		{"import bad digest", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 3, Action: ActionImport, RequestID: "r", DomainID: "d", Checkpoint: "../" + strings.Repeat("a", 61)}
		}, CodeInvalidField},
		{"import upper-case digest", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 3, Action: ActionImport, RequestID: "r", DomainID: "d", Checkpoint: strings.Repeat("AB", 32)}
		}, CodeInvalidField},
		{"import no digest", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 3, Action: ActionImport, RequestID: "r", DomainID: "d"}
		}, CodeInvalidField},
		{"import bad holder", func(r *LauncherRequest) {
			*r = LauncherRequest{Protocol: 3, Action: ActionImport, RequestID: "r", DomainID: "../x", Checkpoint: strings.Repeat("ab", 32)}
		}, CodeInvalidField},
		{"empty action", func(r *LauncherRequest) { r.Action = "" }, CodeUnknownAction},

		{"request_id empty", func(r *LauncherRequest) { r.RequestID = "" }, CodeInvalidField},
		{"request_id 64 chars", func(r *LauncherRequest) { r.RequestID = long(64) }, ""},
		{"request_id 65 chars", func(r *LauncherRequest) { r.RequestID = long(65) }, CodeInvalidField},
		{"request_id upper case", func(r *LauncherRequest) { r.RequestID = "ABC-123" }, ""},
		{"request_id leading dash", func(r *LauncherRequest) { r.RequestID = "-a" }, CodeInvalidField},
		{"request_id underscore", func(r *LauncherRequest) { r.RequestID = "a_b" }, CodeInvalidField},
		{"request_id newline", func(r *LauncherRequest) { r.RequestID = "a\n" }, CodeInvalidField},
		{"request_id uuid", func(r *LauncherRequest) { r.RequestID = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b" }, ""},

		{"domain_id ../x", func(r *LauncherRequest) { r.DomainID = "../x" }, CodeInvalidField},
		{"domain_id A", func(r *LauncherRequest) { r.DomainID = "A" }, CodeInvalidField},
		{"domain_id empty", func(r *LauncherRequest) { r.DomainID = "" }, CodeInvalidField},
		{"domain_id 63 chars", func(r *LauncherRequest) { r.DomainID = long(63) }, ""},
		{"domain_id 64 chars", func(r *LauncherRequest) { r.DomainID = long(64) }, CodeInvalidField},
		{"domain_id single char", func(r *LauncherRequest) { r.DomainID = "a" }, ""},
		{"domain_id leading dash", func(r *LauncherRequest) { r.DomainID = "-a" }, CodeInvalidField},
		{"domain_id dot", func(r *LauncherRequest) { r.DomainID = "a.b" }, CodeInvalidField},
		{"domain_id slash", func(r *LauncherRequest) { r.DomainID = "a/b" }, CodeInvalidField},
		{"domain_id trailing newline", func(r *LauncherRequest) { r.DomainID = "a\n" }, CodeInvalidField},
		{"domain_id unicode", func(r *LauncherRequest) { r.DomainID = "dømain" }, CodeInvalidField},
		{"workspace_id ../x", func(r *LauncherRequest) { r.WorkspaceID = "../x" }, CodeInvalidField},
		{"workspace_id empty", func(r *LauncherRequest) { r.WorkspaceID = "" }, CodeInvalidField},
		{"broker_socket ../x", func(r *LauncherRequest) { r.BrokerSocket = "../x" }, CodeInvalidField},
		{"broker_socket with suffix", func(r *LauncherRequest) { r.BrokerSocket = "b.sock" }, CodeInvalidField},
		{"broker_socket absent", func(r *LauncherRequest) { r.BrokerSocket = "" }, ""},
		{"relay_socket ../x", func(r *LauncherRequest) { r.RelaySocket = "../x" }, CodeInvalidField},
		{"relay_socket with suffix", func(r *LauncherRequest) { r.RelaySocket = "r.sock" }, CodeInvalidField},
		{"relay_socket", func(r *LauncherRequest) { r.RelaySocket = "relay-1" }, ""},
		{"egress_socket ../x", func(r *LauncherRequest) { r.EgressSocket = "../x" }, CodeInvalidField},
		{"egress_socket", func(r *LauncherRequest) { r.EgressSocket = "egress-1" }, ""},
		{"rootfs path", func(r *LauncherRequest) { r.Rootfs = "/var/lib/x" }, CodeInvalidField},
		{"rootfs dotdot", func(r *LauncherRequest) { r.Rootfs = ".." }, CodeInvalidField},
		{"rootfs upper case", func(r *LauncherRequest) { r.Rootfs = "Agents" }, CodeInvalidField},
		{"rootfs", func(r *LauncherRequest) { r.Rootfs = "agents" }, ""},

		{"generation 0", func(r *LauncherRequest) { r.Generation = 0 }, CodeInvalidField},
		{"generation negative", func(r *LauncherRequest) { r.Generation = -1 }, CodeInvalidField},
		{"generation max", func(r *LauncherRequest) { r.Generation = MaxGeneration }, ""},
		{"generation over max", func(r *LauncherRequest) { r.Generation = MaxGeneration + 1 }, CodeInvalidField},

		{"checkpoint upper case", func(r *LauncherRequest) { r.Checkpoint = strings.Repeat("AB", 32) }, CodeInvalidField},
		{"checkpoint short", func(r *LauncherRequest) { r.Checkpoint = strings.Repeat("a", 63) }, CodeInvalidField},
		{"checkpoint path", func(r *LauncherRequest) { r.Checkpoint = "../" + strings.Repeat("a", 61) }, CodeInvalidField},
		{"checkpoint absent", func(r *LauncherRequest) { r.Checkpoint = "" }, ""},

		{"argv empty", func(r *LauncherRequest) { r.Argv = nil }, CodeInvalidField},
		{"argv[0] empty", func(r *LauncherRequest) { r.Argv = []string{""} }, CodeInvalidField},
		{"argv later element empty", func(r *LauncherRequest) { r.Argv = []string{"x", ""} }, ""},
		{"argv at max count", func(r *LauncherRequest) { r.Argv = make([]string, MaxArgv); r.Argv[0] = "x" }, ""},
		{"argv too many", func(r *LauncherRequest) { r.Argv = make([]string, MaxArgv+1); r.Argv[0] = "x" }, CodeInvalidField},
		{"argv element at max", func(r *LauncherRequest) { r.Argv = []string{long(MaxArgBytes)} }, ""},
		{"argv element too long", func(r *LauncherRequest) { r.Argv = []string{long(MaxArgBytes + 1)} }, CodeInvalidField},
		{"argv total at max", func(r *LauncherRequest) {
			r.Argv = nil
			for range MaxArgvBytes / MaxArgBytes {
				r.Argv = append(r.Argv, long(MaxArgBytes))
			}
		}, ""},
		{"argv total too long", func(r *LauncherRequest) {
			r.Argv = nil
			for range MaxArgvBytes/MaxArgBytes + 1 {
				r.Argv = append(r.Argv, long(MaxArgBytes))
			}
		}, CodeInvalidField},
		{"argv NUL", func(r *LauncherRequest) { r.Argv = []string{"/bin/sh\x00x"} }, CodeInvalidField},
		{"argv NUL in later element", func(r *LauncherRequest) { r.Argv = []string{"/bin/sh", "\x00"} }, CodeInvalidField},

		{"env key lower case", func(r *LauncherRequest) { r.Env = map[string]string{"path": "x"} }, ""},
		{"env key underscore first", func(r *LauncherRequest) { r.Env = map[string]string{"_X1": "x"} }, ""},
		{"env key digit first", func(r *LauncherRequest) { r.Env = map[string]string{"1X": "x"} }, CodeInvalidField},
		{"env key empty", func(r *LauncherRequest) { r.Env = map[string]string{"": "x"} }, CodeInvalidField},
		{"env key with =", func(r *LauncherRequest) { r.Env = map[string]string{"A=B": "x"} }, CodeInvalidField},
		{"env key with dash", func(r *LauncherRequest) { r.Env = map[string]string{"A-B": "x"} }, CodeInvalidField},
		{"env key with space", func(r *LauncherRequest) { r.Env = map[string]string{"A B": "x"} }, CodeInvalidField},
		{"env key 128 chars", func(r *LauncherRequest) { r.Env = map[string]string{"A" + long(127): "x"} }, ""},
		{"env key 129 chars", func(r *LauncherRequest) { r.Env = map[string]string{"A" + long(128): "x"} }, CodeInvalidField},
		{"env value with =", func(r *LauncherRequest) { r.Env = map[string]string{"A": "b=c"} }, ""},
		{"env value empty", func(r *LauncherRequest) { r.Env = map[string]string{"A": ""} }, ""},
		{"env value NUL", func(r *LauncherRequest) { r.Env = map[string]string{"A": "b\x00"} }, CodeInvalidField},
		{"env value at max", func(r *LauncherRequest) { r.Env = map[string]string{"A": long(MaxEnvValueBytes)} }, ""},
		{"env value too long", func(r *LauncherRequest) { r.Env = map[string]string{"A": long(MaxEnvValueBytes + 1)} }, CodeInvalidField},
		{"env too many", func(r *LauncherRequest) {
			r.Env = map[string]string{}
			for i := range MaxEnv + 1 {
				r.Env["K"+strings.Repeat("X", i)] = ""
			}
		}, CodeInvalidField},

		{"cwd relative", func(r *LauncherRequest) { r.Cwd = "workspace" }, CodeInvalidField},
		{"cwd dotdot", func(r *LauncherRequest) { r.Cwd = "/workspace/../etc" }, CodeInvalidField},
		{"cwd trailing slash", func(r *LauncherRequest) { r.Cwd = "/workspace/" }, CodeInvalidField},
		{"cwd double slash", func(r *LauncherRequest) { r.Cwd = "//workspace" }, CodeInvalidField},
		{"cwd dot", func(r *LauncherRequest) { r.Cwd = "/workspace/." }, CodeInvalidField},
		{"cwd root", func(r *LauncherRequest) { r.Cwd = "/" }, ""},
		{"cwd NUL", func(r *LauncherRequest) { r.Cwd = "/a\x00" }, CodeInvalidField},
		{"cwd too long", func(r *LauncherRequest) { r.Cwd = "/" + long(MaxArgBytes) }, CodeInvalidField},

		{"seccomp absent", func(r *LauncherRequest) { r.Seccomp = nil }, ""},
		{"seccomp one insn", func(r *LauncherRequest) { r.Seccomp = good }, ""},
		{"seccomp max insns", func(r *LauncherRequest) { r.Seccomp = NewSeccompProgram(make([]byte, 8*MaxSeccompInsns)) }, ""},
		{"seccomp too many insns", func(r *LauncherRequest) { r.Seccomp = NewSeccompProgram(make([]byte, 8*(MaxSeccompInsns+1))) }, CodeInvalidField},
		{"seccomp not multiple of 8", func(r *LauncherRequest) { r.Seccomp = NewSeccompProgram(make([]byte, 12)) }, CodeInvalidField},
		{"seccomp empty", func(r *LauncherRequest) { r.Seccomp = NewSeccompProgram(nil) }, CodeInvalidField},
		{"seccomp bad base64", func(r *LauncherRequest) { r.Seccomp = &SeccompProgram{ProgramB64: "!!!!", SHA256: good.SHA256} }, CodeInvalidField},
		{"seccomp url base64", func(r *LauncherRequest) {
			raw := bytes.Repeat([]byte{0xfb, 0xff, 0xfe}, 8)
			p := NewSeccompProgram(raw)
			p.ProgramB64 = base64.URLEncoding.EncodeToString(raw)
			r.Seccomp = p
		}, CodeInvalidField},
		{"seccomp unpadded", func(r *LauncherRequest) {
			r.Seccomp = &SeccompProgram{ProgramB64: strings.TrimRight(good.ProgramB64, "="), SHA256: good.SHA256}
		}, CodeInvalidField},
		{"seccomp with newline", func(r *LauncherRequest) {
			p := NewSeccompProgram(make([]byte, 16))
			p.ProgramB64 = p.ProgramB64[:8] + "\n" + p.ProgramB64[8:]
			r.Seccomp = p
		}, CodeInvalidField},
		{"seccomp non-canonical padding bits", func(r *LauncherRequest) {
			r.Seccomp = &SeccompProgram{ProgramB64: "AAAAAAAAAAB=", SHA256: good.SHA256}
		}, CodeInvalidField},
		{"seccomp digest mismatch", func(r *LauncherRequest) {
			r.Seccomp = &SeccompProgram{ProgramB64: good.ProgramB64, SHA256: strings.Repeat("0", 64)}
		}, CodeInvalidField},
		{"seccomp digest upper case", func(r *LauncherRequest) {
			r.Seccomp = &SeccompProgram{ProgramB64: good.ProgramB64, SHA256: strings.ToUpper(good.SHA256)}
		}, CodeInvalidField},
		{"seccomp digest missing", func(r *LauncherRequest) { r.Seccomp = &SeccompProgram{ProgramB64: good.ProgramB64} }, CodeInvalidField},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DecodeLauncherRequest(js(t, validCreate()))
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(r)
			err = r.Validate()
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, tc.code)
			// The launcher runs the same check on decode.
			if b, merr := Encode(r); merr == nil && len(b) <= LauncherRequestMax {
				if _, derr := DecodeLauncherRequest(b); derr == nil {
					t.Fatal("Validate refused what DecodeLauncherRequest admits")
				}
			}
		})
	}
}

func TestValidateLifecycleIgnoresCreateFields(t *testing.T) {
	for _, a := range []string{ActionFreeze, ActionThaw, ActionCheckpoint, ActionDestroy, ActionInspect} {
		r := &LauncherRequest{Protocol: 1, Action: a, RequestID: "r", DomainID: "d"}
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", a, err)
		}
		r.DomainID = "../x"
		wantCode(t, r.Validate(), CodeInvalidField)
	}
	if err := (&LauncherRequest{Action: ActionPreflight, RequestID: "r"}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestSeccompProgramDecode(t *testing.T) {
	raw := []byte{0x06, 0, 0, 0, 0, 0, 0xff, 0x7f} // ret ALLOW
	p := NewSeccompProgram(raw)
	got, err := p.Decode()
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("%x %v", got, err)
	}
	if p.ProgramB64 != "BgAAAAAA/38=" {
		t.Fatalf("base64 %q", p.ProgramB64)
	}
}

func response(typ string, body any) map[string]any {
	m := map[string]any{"protocol": 1, "request_id": "r-1", "type": typ}
	if body != nil {
		m[typ] = body
	}
	return m
}

func TestDecodeLauncherResponse(t *testing.T) {
	code0 := 0
	okBodies := map[string]any{
		TypeError:      E(CodeDomainBusy),
		TypePreflight:  &PreflightReport{Verdict: "ok", Namespaces: []string{"user"}},
		TypeStarted:    &Started{DomainID: "d", Generation: 1, Seccomp: "unfiltered"},
		TypeViolation:  &Violation{Syscall: "socket", Nr: 41, Args: []uint64{2, 1, 0, 0, 0, 0}, Count: 1},
		TypeExited:     &Exited{ExitCode: &code0},
		TypeDomain:     &DomainState{DomainID: "d"},
		TypeCheckpoint: &CheckpointResult{DomainID: "d", SHA256: strings.Repeat("a", 64)},
	}
	for typ, body := range okBodies {
		t.Run("ok "+typ, func(t *testing.T) {
			r, err := DecodeLauncherResponse(js(t, response(typ, body)))
			if err != nil {
				t.Fatal(err)
			}
			if r.Type != typ || !r.hasBody() {
				t.Fatalf("%+v", r)
			}
		})
	}
	raw := func(s string) []byte { return []byte(s) }
	cases := []struct {
		name string
		doc  []byte
		code Code
	}{
		{"error with unknown code", js(t, response(TypeError, map[string]any{"code": "root_shell_granted", "message": "x", "retryable": false})), CodeInvalidField},
		{"error with empty code", js(t, response(TypeError, map[string]any{"code": "", "message": "", "retryable": false})), CodeInvalidField},
		{"error body missing", js(t, response(TypeError, nil)), CodeMissingField},
		{"error body explicit null", raw(`{"protocol":1,"request_id":"","type":"error","error":null}`), CodeInvalidField},
		{"started body missing", js(t, response(TypeStarted, nil)), CodeMissingField},
		{"started body null", raw(`{"protocol":1,"request_id":"r","type":"started","started":null}`), CodeInvalidField},
		{"exited body null", raw(`{"protocol":1,"request_id":"r","type":"exited","exited":null}`), CodeInvalidField},
		{"body of another type", raw(`{"protocol":1,"request_id":"r","type":"started","exited":{}}`), CodeUnknownField},
		{"two bodies", raw(`{"protocol":1,"request_id":"r","type":"domain","domain":{},"checkpoint":{}}`), CodeUnknownField},
		{"unknown type", js(t, response("shell", map[string]any{})), CodeUnknownAction},
		{"type missing", raw(`{"protocol":1,"request_id":"r","domain":{}}`), CodeMissingField},
		{"type not a string", raw(`{"protocol":1,"request_id":"r","type":1}`), CodeInvalidField},
		{"request_id missing", raw(`{"protocol":1,"type":"domain","domain":{}}`), CodeMissingField},
		{"request_id empty on non-error", raw(`{"protocol":1,"request_id":"","type":"domain","domain":{}}`), CodeInvalidField},
		{"request_id invalid", raw(`{"protocol":1,"request_id":"../x","type":"domain","domain":{}}`), CodeInvalidField},
		{"wrong body type", raw(`{"protocol":1,"request_id":"r","type":"domain","domain":[]}`), CodeInvalidField},
		{"wrong nested type", raw(`{"protocol":1,"request_id":"r","type":"domain","domain":{"exists":"yes"}}`), CodeInvalidField},
		{"nested unknown field", raw(`{"protocol":1,"request_id":"r","type":"domain","domain":{"root":true}}`), CodeUnknownField},
		{"nested wrong case", raw(`{"protocol":1,"request_id":"r","type":"domain","domain":{"Exists":true}}`), CodeUnknownField},
		{"unknown field in limit", raw(`{"protocol":1,"request_id":"r","type":"started","started":{"limits":[{"name":"pids","x":1}]}}`), CodeUnknownField},
		{"version 4", raw(`{"protocol":4,"request_id":"r","type":"domain","domain":{}}`), CodeUnsupportedVersion},
		{"too deep", raw(`{"protocol":1,"request_id":"r","type":"started","started":{"limits":[{"name":{"a":{"b":{}}}}]}}`), CodeTooDeep},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeLauncherResponse(tc.doc)
			wantCode(t, err, tc.code)
		})
	}
}

func TestDecodeLauncherResponseErrorFrame(t *testing.T) {
	// An error before admission carries no request id; its text is always
	// the local catalogue's, whatever the peer wrote.
	b := []byte(`{"protocol":1,"request_id":"","type":"error","error":{"code":"frame_timeout","message":"/root/secret","retryable":false}}`)
	r, err := DecodeLauncherResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if *r.Error != *E(CodeFrameTimeout) {
		t.Fatalf("peer text kept: %+v", r.Error)
	}
}

func TestLauncherResponsesFitTheirCap(t *testing.T) {
	// The biggest frames the launcher builds: preflight with every field,
	// a violation with six maximal arguments.
	rep := &PreflightReport{
		Kernel: strings.Repeat("9", 64), Arch: "amd64", Namespaces: []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"},
		CgroupParent: "/" + strings.Repeat("p", 4095), CgroupControllers: strings.Fields("cpuset cpu io memory hugetlb pids rdma misc"),
		SeccompActions: strings.Fields("kill_process kill_thread trap errno user_notif trace log allow"),
		RootfsDigest:   strings.Repeat("a", 64), RootfsExpected: strings.Repeat("b", 64), FloorSHA256: strings.Repeat("c", 64),
		LauncherSHA256: strings.Repeat("d", 64), Verdict: "refused", Problems: make([]string, 16),
	}
	for i := range rep.Problems {
		rep.Problems[i] = strings.Repeat("x", 120)
	}
	for range 6 {
		rep.Limits = append(rep.Limits, Limit{Name: "memory_bytes", Value: ^uint64(0), Reason: strings.Repeat("r", 100)})
	}
	for _, r := range []*LauncherResponse{
		{Protocol: 1, RequestID: strings.Repeat("a", 64), Type: TypePreflight, Preflight: rep},
		{Protocol: 1, RequestID: strings.Repeat("a", 64), Type: TypeViolation, Violation: &Violation{Syscall: "socket", Args: []uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}, Count: ^uint64(0)}},
	} {
		b, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > LauncherResponseMax {
			t.Fatalf("%s frame of %d bytes exceeds the cap", r.Type, len(b))
		}
		if _, err := DecodeLauncherResponse(b); err != nil {
			t.Fatalf("%s: %v", r.Type, err)
		}
	}
}

// TestVersionFor: each action goes out in the oldest version that has it,
// so an older launcher still serves what it knows; every version named is
// one this build speaks.
func TestVersionFor(t *testing.T) {
	if got := LauncherVersions(); !reflect.DeepEqual(got, []int{1, 2, 3}) || got[len(got)-1] != LauncherVersion {
		t.Fatalf("LauncherVersions() = %v, LauncherVersion %d", got, LauncherVersion)
	}
	want := map[string]int{ActionRelease: 2, ActionImport: 3}
	for action := range LauncherRequestSchema().Kinds {
		if got := VersionFor(action); got != max(want[action], 1) {
			t.Errorf("VersionFor(%s) = %d", action, got)
		}
	}
}
