package lockfile

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseNPMLock: a package-lock.json npm wrote (lockfileVersion 3,
// registry URLs omitted as omit-lockfile-registry-resolved does) pins
// each tarball at the registry's path with its sha512, nested copies
// included; nothing else is pinned.
func TestParseNPMLock(t *testing.T) {
	s, err := Parse("package-lock.json", read(t, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/is-number/-/is-number-7.0.0.tgz": "is-number@7.0.0",
		"/is-number/-/is-number-6.0.0.tgz": "is-number@6.0.0",
		"/is-odd/-/is-odd-3.0.1.tgz":       "is-odd@3.0.1",
	} {
		p, ok := s.NPMTarball(path)
		if !ok || p.Name+"@"+p.Version != want || !strings.HasPrefix(p.Integrity, "sha512-") {
			t.Errorf("%s: %+v %v, want %s", path, p, ok, want)
		}
	}
	for _, path := range []string{"/is-number/-/is-number-7.0.1.tgz", "/is-even/-/is-even-1.0.0.tgz", "/is-number", "/t/-/t-1.0.0.tgz"} {
		if p, ok := s.NPMTarball(path); ok {
			t.Errorf("%s pinned: %+v", path, p)
		}
	}
	// A resolved URL, when the lock has one, is where the tarball is.
	s, err = Parse("a/npm-shrinkwrap.json", []byte(`{"lockfileVersion":2,"packages":{"":{"name":"x"},
		"node_modules/@s/p":{"version":"1.2.3","resolved":"https://registry.npmjs.org/@s/p/-/p-1.2.3.tgz","integrity":"sha1-AAAA sha512-BBBB"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := s.NPMTarball("/@s/p/-/p-1.2.3.tgz"); !ok || p.Name != "@s/p" || p.Integrity != "sha512-BBBB" {
		t.Errorf("scoped, resolved: %+v %v", p, ok)
	}
}

// TestParseGoSum: go.sum's zip and go.mod hashes, by module and version.
func TestParseGoSum(t *testing.T) {
	s, err := Parse("go.sum", read(t, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := s.GoZip("github.com/google/uuid", "v1.6.0"); !ok || h != "h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=" {
		t.Errorf("uuid zip: %q %v", h, ok)
	}
	if h, ok := s.GoMod("github.com/google/uuid", "v1.6.0"); !ok || h != "h1:TIyPZe4MgqvfeYDBFedMoGGpEw/LqOeaOT+nhxU+yHo=" {
		t.Errorf("uuid go.mod: %q %v", h, ok)
	}
	if _, ok := s.GoZip("github.com/google/uuid", "v1.5.0"); ok {
		t.Error("an unlisted version is pinned")
	}
}

// TestParseRefusals: a lockfile that does not read strictly fails whole;
// it never yields a smaller set.
func TestParseRefusals(t *testing.T) {
	for name, c := range map[string]struct{ file, data string }{
		"npm v1":           {"package-lock.json", `{"lockfileVersion":1,"dependencies":{}}`},
		"npm not json":     {"package-lock.json", `{"lockfileVersion":3,`},
		"npm md5":          {"package-lock.json", `{"lockfileVersion":3,"packages":{"node_modules/a":{"version":"1.0.0","integrity":"md5-AAAA"}}}`},
		"npm git":          {"package-lock.json", `{"lockfileVersion":3,"packages":{"node_modules/a":{"version":"1.0.0","resolved":"git+ssh://git@github.com/a/a.git","integrity":"sha512-AA"}}}`},
		"npm traversal":    {"package-lock.json", `{"lockfileVersion":3,"packages":{"node_modules/../../a":{"version":"1.0.0","integrity":"sha512-AA"}}}`},
		"npm bad version":  {"package-lock.json", `{"lockfileVersion":3,"packages":{"node_modules/a":{"version":"1.0.0/../../x","integrity":"sha512-AA"}}}`},
		"go.sum fields":    {"go.sum", "github.com/a/b v1.0.0\n"},
		"go.sum hash":      {"go.sum", "github.com/a/b v1.0.0 h1:short\n"},
		"go.sum path":      {"go.sum", "github.com/a/../b v1.0.0 h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=\n"},
		"go.sum version":   {"go.sum", "github.com/a/b latest h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=\n"},
		"go.sum long line": {"go.sum", strings.Repeat("a", 5000) + "\n"},
		"not a lockfile":   {"yarn.lock", "a@1:\n"},
	} {
		if s, err := Parse(c.file, []byte(c.data)); err == nil {
			t.Errorf("%s: parsed: %+v", name, s)
		}
	}
}

// TestRead: the lockfiles of the named commit, from the repository's
// objects; a dependency's or a fixture's lockfile is not the project's,
// and a later commit's change is not read.
func TestRead(t *testing.T) {
	bare, base := testbed.BareRepo(t, t.TempDir(), "repo.git", map[string]string{
		"go.sum":                              string(read(t, "go.sum")),
		"web/package-lock.json":               string(read(t, "package-lock.json")),
		"node_modules/x/package-lock.json":    `{"lockfileVersion":3,"packages":{"node_modules/evil":{"version":"6.6.6","integrity":"sha512-AA"}}}`,
		"internal/testdata/package-lock.json": `not even json`,
		"README.md":                           "hello",
	}, "base")
	s, err := Read(context.Background(), bare, base)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Files, ","); got != "go.sum,web/package-lock.json" {
		t.Errorf("files read: %s", got)
	}
	if _, ok := s.NPMTarball("/is-odd/-/is-odd-3.0.1.tgz"); !ok {
		t.Error("web/package-lock.json not read")
	}
	if _, ok := s.NPMTarball("/evil/-/evil-6.6.6.tgz"); ok {
		t.Error("a lockfile under node_modules was read")
	}
	if _, err := Read(context.Background(), bare, "HEAD"); err == nil {
		t.Error("a ref name was read as a commit")
	}
	if _, err := Read(context.Background(), bare, strings.Repeat("0", 40)); err == nil {
		t.Error("a missing commit read")
	}
}

// FuzzParse: no input makes Parse panic, and a parsed set only names
// tarball paths under the registry's root.
func FuzzParse(f *testing.F) {
	for _, n := range []string{"package-lock.json", "go.sum"} {
		b, _ := os.ReadFile("testdata/" + n)
		f.Add(n, b)
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		if name != "go.sum" {
			name = "package-lock.json"
		}
		s, err := Parse(name, data)
		if err != nil {
			return
		}
		for p := range s.npm {
			if !strings.HasPrefix(p, "/") || strings.Contains(p, "/../") {
				t.Fatalf("tarball path %q", p)
			}
		}
	})
}
