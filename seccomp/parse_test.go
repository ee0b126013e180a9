package seccomp

import (
	"errors"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	const ok = `{"names":["read"],"action":"SCMP_ACT_ALLOW"}`
	prof := func(rules ...string) string {
		return `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[` + strings.Join(rules, ",") + `]}`
	}
	tests := []struct {
		name    string
		doc     string
		want    error
		mention string // the error must name this (rule, key, value)
	}{
		{"not json", `{`, ErrSyntax, ""},
		{"not an object", `[]`, ErrType, ""},
		{"trailing data", `{"defaultAction":"SCMP_ACT_ALLOW"} {}`, ErrSyntax, "trailing"},
		{"too large", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[` + strings.Repeat(" ", MaxProfileSize) + `]}`, ErrTooLarge, ""},
		{"missing default", `{"syscalls":[]}`, ErrMissingField, "defaultAction"},
		{"unknown default", `{"defaultAction":"SCMP_ACT_MAYBE"}`, ErrUnknownAction, "SCMP_ACT_MAYBE"},
		{"default wrong type", `{"defaultAction":1}`, ErrType, "defaultAction"},
		{"duplicate top key", `{"defaultAction":"SCMP_ACT_ALLOW","defaultAction":"SCMP_ACT_ERRNO"}`, ErrDuplicateKey, "defaultAction"},
		{"case-variant key", `{"DefaultAction":"SCMP_ACT_ALLOW"}`, ErrUnknownField, "DefaultAction"},
		{"unknown top key", `{"defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/x"}`, ErrUnknownField, "listenerPath"},
		{"unknown arch", `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_Z80"]}`, ErrUnknownArch, "SCMP_ARCH_Z80"},
		{"duplicate arch", `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86_64"]}`, ErrDuplicate, "SCMP_ARCH_X86_64"},
		{"arch and archMap", `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],"archMap":[{"architecture":"SCMP_ARCH_X86_64","subArchitectures":[]}]}`, ErrInvalid, "archMap"},
		{"archMap unknown sub", `{"defaultAction":"SCMP_ACT_ALLOW","archMap":[{"architecture":"SCMP_ARCH_X86_64","subArchitectures":["SCMP_ARCH_VAX"]}]}`, ErrUnknownArch, "SCMP_ARCH_VAX"},
		{"spec allow refused", `{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_SPEC_ALLOW"]}`, ErrUnknownFlag, "SPEC_ALLOW"},
		{"unknown flag", `{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_FAST"]}`, ErrUnknownFlag, "FAST"},
		{"default errno too big", `{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":70000}`, ErrInvalid, "70000"},
		{"default errno negative", `{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":-1}`, ErrType, "defaultErrnoRet"},
		{"errno on allow", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","errnoRet":1}`), ErrInvalid, "syscalls[0] (read)"},
		{"unknown syscall", prof(ok, `{"names":["read","frobnicate"],"action":"SCMP_ACT_ALLOW"}`), ErrUnknownSyscall, `syscalls[1] (read, frobnicate): names: unknown syscall name: "frobnicate"`},
		{"empty syscall name", prof(`{"names":[""],"action":"SCMP_ACT_ALLOW"}`), ErrUnknownSyscall, "syscalls[0]"},
		{"no names", prof(`{"names":[],"action":"SCMP_ACT_ALLOW"}`), ErrMissingField, "syscalls[0]"},
		{"name and names", prof(`{"name":"read","names":["write"],"action":"SCMP_ACT_ALLOW"}`), ErrInvalid, "syscalls[0]"},
		{"duplicate name", prof(`{"names":["read","read"],"action":"SCMP_ACT_ALLOW"}`), ErrDuplicate, `"read" listed twice`},
		{"missing action", prof(`{"names":["read"]}`), ErrMissingField, "syscalls[0] (read): action"},
		{"unknown action", prof(`{"names":["read"],"action":"SCMP_ACT_PERHAPS"}`), ErrUnknownAction, "syscalls[0] (read): action"},
		{"duplicate rule key", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","action":"SCMP_ACT_ERRNO"}`), ErrDuplicateKey, "syscalls[0] (read)"},
		{"unknown rule key", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","argz":[]}`), ErrUnknownField, `"argz"`},
		{"unknown op", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":1,"op":"SCMP_CMP_LIKE"}]}`), ErrUnknownOp, "syscalls[0] (read): args[0]"},
		{"missing op", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":1}]}`), ErrMissingField, "op"},
		{"index out of range", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":6,"value":1,"op":"SCMP_CMP_EQ"}]}`), ErrArgIndex, "syscalls[0] (read): args[0]"},
		{"index negative", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":-1,"value":1,"op":"SCMP_CMP_EQ"}]}`), ErrType, "index"},
		{"value fractional", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":1.5,"op":"SCMP_CMP_EQ"}]}`), ErrType, "value"},
		{"value exponent", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":1e3,"op":"SCMP_CMP_EQ"}]}`), ErrType, "value"},
		{"value too big", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":18446744073709551616,"op":"SCMP_CMP_EQ"}]}`), ErrType, "value"},
		{"value as string", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":"1","op":"SCMP_CMP_EQ"}]}`), ErrType, "value"},
		{"duplicate arg key", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"index":1,"value":1,"op":"SCMP_CMP_EQ"}]}`), ErrDuplicateKey, `syscalls[0] (read): args[0]: duplicate key: "index"`},
		{"duplicate key in a later rule", prof(ok, ok, `{"names":["write"],"action":"SCMP_ACT_ALLOW","includes":{"caps":[],"caps":["CAP_SYS_ADMIN"]}}`), ErrDuplicateKey, `syscalls[2] (write): includes: duplicate key: "caps"`},
		{"escaped duplicate key", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","\u0061ction":"SCMP_ACT_KILL"}`), ErrDuplicateKey, `syscalls[0] (read): duplicate key: "action"`},
		{"duplicate archMap key", `{"defaultAction":"SCMP_ACT_ALLOW","archMap":[{"architecture":"SCMP_ARCH_X86_64","architecture":"SCMP_ARCH_X86"}]}`, ErrDuplicateKey, `archMap[0]: duplicate key: "architecture"`},
		{"malformed inside a rule", prof(ok, `{"names":["write"],"action":SCMP_ACT_ALLOW}`), ErrSyntax, "syscalls[1]: action: malformed JSON: invalid character 'S'"},
		{"nested too deep in a rule", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":[[0]]}]}`), ErrType, "syscalls[0] (read): args[0].index: wrong JSON type"},
		{"same argument twice", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":1,"value":1,"op":"SCMP_CMP_NE"},{"index":1,"value":2,"op":"SCMP_CMP_NE"}]}`), ErrDuplicate, "args[1]"},
		{"masked datum outside mask", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":15,"valueTwo":16,"op":"SCMP_CMP_MASKED_EQ"}]}`), ErrInvalid, "never matches"},
		{"unknown include arch", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","includes":{"arches":["pdp11"]}}`), ErrUnknownArch, "pdp11"},
		{"unknown cap", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","includes":{"caps":["CAP_EVERYTHING"]}}`), ErrUnknownCap, "CAP_EVERYTHING"},
		{"bad minKernel", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","includes":{"minKernel":"4"}}`), ErrInvalid, "minKernel"},
		{"unknown filter key", prof(`{"names":["read"],"action":"SCMP_ACT_ALLOW","excludes":{"kernel":"4.8"}}`), ErrUnknownField, "excludes"},
		{"syscalls not array", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":{}}`, ErrType, "syscalls"},
		{"rule not object", prof(`"read"`), ErrType, "syscalls[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse accepted %s", tc.doc)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %q does not wrap %v", err, tc.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	doc := `{
		"defaultAction": "SCMP_ACT_ERRNO",
		"defaultErrnoRet": 38,
		"archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
		"flags": ["SECCOMP_FILTER_FLAG_LOG"],
		"syscalls": [
			{"name": "read", "action": "SCMP_ACT_ALLOW", "comment": "deprecated singular form"},
			{"names": ["write"], "action": "SCMP_ACT_ERRNO", "errnoRet": null, "args": null, "includes": {}, "excludes": {"caps": ["CAP_SYS_ADMIN"], "minKernel": ""}},
			{"names": ["socket"], "action": "SCMP_ACT_NOTIFY", "args": [{"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]},
			{"names": ["ioctl"], "action": "SCMP_ACT_TRACE", "errnoRet": 7, "args": [{"index": 1, "value": 4294967295, "valueTwo": 21522, "op": "SCMP_CMP_MASKED_EQ"}]},
			{"names": ["socketcall"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["x86"], "minKernel": "4.8"}}
		]
	}`
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != ActErrno || p.DefaultErrnoRet != 38 || len(p.Syscalls) != 5 || len(p.ArchMap) != 1 {
		t.Fatalf("unexpected profile %+v", p)
	}
	if got := p.Syscalls[1].ErrnoRet; got != 1 {
		t.Errorf("errnoRet defaults to EPERM (1), got %d", got)
	}
	if got := p.Syscalls[3].Args[0]; got.Value != 0xffffffff || got.ValueTwo != 0x5412 || got.Op != OpMaskedEqual {
		t.Errorf("masked arg decoded as %+v", got)
	}
	if got := p.Syscalls[4].Includes.MinKernel; got != (KernelVersion{4, 8}) {
		t.Errorf("minKernel decoded as %v", got)
	}
	if p.Syscalls[0].Names[0] != "read" {
		t.Errorf("name not decoded: %+v", p.Syscalls[0])
	}
}

// FuzzParseProfile: Parse must never panic, and whatever it accepts must
// compile or fail with an error, never crash libseccomp.
func FuzzParseProfile(f *testing.F) {
	for _, n := range ShippedNames() {
		b, err := ShippedJSON(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError: %v", err, err)
			}
			return
		}
		if len(p.Syscalls) > 64 {
			return // keep each fuzz iteration cheap
		}
		prog, err := Compile(p, Options{})
		if err == nil && (prog.Count == 0 || prog.Count > MaxInstructions) {
			t.Fatalf("Compile returned %d instructions", prog.Count)
		}
	})
}
