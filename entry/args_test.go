package entry

import (
	"errors"
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	ok := func(args ...string) []string { return args }
	cases := []struct {
		name string
		args []string
		want *Spec // nil: ErrUsage
	}{
		{"argv only", ok("--", "codex", "exec"), &Spec{Argv: []string{"codex", "exec"}}},
		{"everything", ok("--home-file", ".codex/config.toml=bW9kZWw=", "--env", "A=b=c", "--bridge", "127.0.0.1:8787=/run/autonomic/inference.sock", "--", "x"),
			&Spec{HomeFiles: []HomeFile{{".codex/config.toml", []byte("model")}}, Env: []string{"A=b=c"},
				Bridges: []Bridge{{netip.MustParseAddrPort("127.0.0.1:8787"), "/run/autonomic/inference.sock"}}, Argv: []string{"x"}}},
		{"ipv6 loopback bridge", ok("--bridge", "[::1]:8787=/s", "--", "x"), &Spec{Bridges: []Bridge{{netip.MustParseAddrPort("[::1]:8787"), "/s"}}, Argv: []string{"x"}}},
		{"empty home file", ok("--home-file", "f=", "--", "x"), &Spec{HomeFiles: []HomeFile{{"f", []byte{}}}, Argv: []string{"x"}}},
		{"no --", ok("codex"), nil},
		{"nothing", ok(), nil},
		{"nothing after --", ok("--"), nil},
		{"empty program", ok("--", ""), nil},
		{"flag without value", ok("--env"), nil},
		{"unknown flag", ok("--privileged", "x=y", "--", "x"), nil},
		{"value without =", ok("--env", "A", "--", "x"), nil},
		{"env bad name", ok("--env", "1A=b", "--", "x"), nil},
		{"env empty name", ok("--env", "=b", "--", "x"), nil},
		{"home absolute", ok("--home-file", "/etc/passwd=eA==", "--", "x"), nil},
		{"home dotdot", ok("--home-file", "../x=eA==", "--", "x"), nil},
		{"home inner dotdot", ok("--home-file", "a/../../x=eA==", "--", "x"), nil},
		{"home only dotdot", ok("--home-file", "..=eA==", "--", "x"), nil},
		{"home dot", ok("--home-file", ".=eA==", "--", "x"), nil},
		{"home empty", ok("--home-file", "=eA==", "--", "x"), nil},
		{"home unclean", ok("--home-file", "a//b=eA==", "--", "x"), nil},
		{"home trailing slash", ok("--home-file", "a/=eA==", "--", "x"), nil},
		{"home bad base64", ok("--home-file", "a=!!", "--", "x"), nil},
		{"home base64 with newline", ok("--home-file", "a=eA=\n=", "--", "x"), nil},
		{"bridge public", ok("--bridge", "1.1.1.1:80=/s", "--", "x"), nil},
		{"bridge any", ok("--bridge", "0.0.0.0:8787=/s", "--", "x"), nil},
		{"bridge v6 any", ok("--bridge", "[::]:8787=/s", "--", "x"), nil},
		{"bridge hostname", ok("--bridge", "localhost:8787=/s", "--", "x"), nil},
		{"bridge port 0", ok("--bridge", "127.0.0.1:0=/s", "--", "x"), nil},
		{"bridge relative socket", ok("--bridge", "127.0.0.1:8787=s", "--", "x"), nil},
	}
	for _, c := range cases {
		got, err := Parse(c.args)
		if c.want == nil {
			if !errors.Is(err, ErrUsage) {
				t.Errorf("%s: Parse = %+v, %v; want ErrUsage", c.name, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Parse = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

// FuzzParse: any command line decodes or is ErrUsage, never panics, and
// what decodes keeps every invariant: home files local, bridges loopback,
// a program to run.
func FuzzParse(f *testing.F) {
	f.Add("--home-file\x00a/b=eA==\x00--bridge\x00127.0.0.1:8787=/s\x00--\x00x")
	f.Fuzz(func(t *testing.T, joined string) {
		args := splitNUL(joined)
		s, err := Parse(args)
		if err != nil {
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("%q: error %v is not ErrUsage", args, err)
			}
			return
		}
		if len(s.Argv) == 0 || s.Argv[0] == "" {
			t.Fatalf("%q: no program", args)
		}
		for _, h := range s.HomeFiles {
			if !filepath.IsLocal(h.Rel) || filepath.Clean(h.Rel) != h.Rel {
				t.Fatalf("%q: home file %q is not local", args, h.Rel)
			}
		}
		for _, b := range s.Bridges {
			if !b.Addr.Addr().IsLoopback() || !filepath.IsAbs(b.Socket) {
				t.Fatalf("%q: bridge %+v", args, b)
			}
		}
	})
}

func splitNUL(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != 0 {
			i++
		}
		out = append(out, s[:i])
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}
