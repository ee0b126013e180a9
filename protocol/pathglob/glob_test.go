package pathglob

import (
	"math/rand/v2"
	"path"
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		glob, path string
		want       bool
	}{
		{"lib/**", "lib/auth.ex", true},
		{"lib/**", "lib/a/b/c.ex", true},
		{"lib/**", "lib", true}, // ** matches zero segments
		{"lib/**", "libx/a", false},
		{"**", "a", true},
		{"**", "a/b/c", true},
		{"**/*secret*", "secret", true},
		{"**/*secret*", "a/b/my_secret.txt", true},
		{"**/*secret*", "a/secretive/b", false},
		{"**/*secret*/**", "a/secretive/b", true},
		{".env", ".env", true},
		{".env", "a/.env", false},
		{"**/.env", "a/.env", true},
		{"test/**", "test/auth_test.exs", true},
		{"test/**", "lib/test/x", false},
		{"src/*.go", "src/main.go", true},
		{"src/*.go", "src/a/main.go", false},
		{"src/*", "src/a", true},
		{"*.md", "README.md", true},
		{"*.md", "docs/README.md", false},
		{"README*", "README.md", true},
		{"a/**/b/**/c", "a/b/c", true},
		{"a/**/b/**/c", "a/x/b/y/z/c", true},
		{"a/**/b/**/c", "a/x/y/c", false},
		{"a/**/**/b", "a/b", true},
		{"[a-c]?/x", "b1/x", true},
		{"[a-c]?/x", "d1/x", false},
		{"**/x", "x", true},
		{"**/x", "a/x/y", false},
	}
	for _, c := range cases {
		g, err := Compile(c.glob)
		if err != nil {
			t.Fatalf("%q: %v", c.glob, err)
		}
		if got := matchString(g, c.path); got != c.want {
			t.Errorf("%q ~ %q = %v, want %v", c.glob, c.path, got, c.want)
		}
	}
}

func TestCompileGlobRefuses(t *testing.T) {
	for _, bad := range []string{"", "/abs", "a//b", "a/./b", "../x", "a/..", "a**b", "a/[", "secrets[/**", "a/\u200bb", "a\nb", "x\\y", "a\x00b", strings.Repeat("a", MaxGlobLen+1)} {
		if _, err := Compile(bad); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
}

func TestValidPath(t *testing.T) {
	for p, want := range map[string]bool{
		"a": true, "a/b.c": true, ".env": true, "a/.b/c": true,
		"": false, "/a": false, "a/": false, "a//b": false, "./a": false, "a/../b": false,
		"..": false, "a/.": false, "a\x00": false, "a\\b": false, strings.Repeat("a", MaxPathLen+1): false,
	} {
		if got := ValidPath(p); got != want {
			t.Errorf("ValidPath(%q) = %v, want %v", p, got, want)
		}
	}
}

// refMatch is the obvious recursive matcher over path.Match segments (what
// the broker once had): the greedy matcher must agree with it on every
// input.
func refMatch(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if refMatch(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], name[0]); err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

func TestGlobAgreesWithReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"**", "*", "a", "b", "a*", "*b", "*a*", "?", "[ab]", "ab"}
	names := []string{"a", "b", "ab", "ba", "aa", "c"}
	for i := 0; i < 20000; i++ {
		var ps, ns []string
		for j := r.IntN(5) + 1; j > 0; j-- {
			ps = append(ps, pieces[r.IntN(len(pieces))])
		}
		for j := r.IntN(6) + 1; j > 0; j-- {
			ns = append(ns, names[r.IntN(len(names))])
		}
		pat, name := strings.Join(ps, "/"), strings.Join(ns, "/")
		g, err := Compile(pat)
		if err != nil {
			t.Fatalf("%q: %v", pat, err)
		}
		if got, want := matchString(g, name), refMatch(ps, ns); got != want {
			t.Fatalf("%q ~ %q = %v, reference says %v", pat, name, got, want)
		}
	}
}

func matchString(g Glob, p string) bool { return g.MatchString(p) }

func TestPathDepthBound(t *testing.T) {
	deep := strings.Repeat("a/", MaxSegments-1) + "a"
	if !ValidPath(deep) || ValidPath(deep+"/a") {
		t.Fatal("segment bound is off")
	}
}

// TestNamesRefused: control characters, invisible and default-ignorable
// code points and invalid UTF-8 never make a path.
func TestNamesRefused(t *testing.T) {
	for _, p := range []string{".g\u200cit/hooks/x", "a\nb", "a\tb", "a\x7fb", "a\u200db", "a\u202eb", "a\ufe0fb",
		"a\u00adb", "a\u2028b", "\ufeffa", "a\xffb", "a\u3164b", "a\ue000b", "a\u0085b"} {
		if ValidPath(p) {
			t.Errorf("%q is a valid path", p)
		}
	}
	for _, p := range []string{"a/b", "ünïcode/ß.go", "日本/語.txt", "a b/c"} {
		if !ValidPath(p) {
			t.Errorf("%q refused", p)
		}
	}
}

func TestFoldedMatch(t *testing.T) {
	g, err := CompileFolded("secrets/**")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"secrets/x", "Secrets/x", "SECRETS/x", "ｓｅｃｒｅｔｓ/x", "ＳＥＣＲＥＴＳ/x", "sEcReTs/a/b"} {
		var sp, f Path
		if !sp.Split(p) || !f.Fold(&sp) || !g.Match(&f) {
			t.Errorf("%q escapes folded secrets/**", p)
		}
	}
	exact, _ := Compile("secrets/**")
	if exact.MatchString("Secrets/x") {
		t.Error("an exact glob matched a case variant")
	}
	if g.String() != "secrets/**" {
		t.Errorf("folded glob reads %q", g.String())
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	g, _ := Compile("lib/**/*.go")
	var p Path
	if n := testing.AllocsPerRun(100, func() { p.Split("lib/a/b/c.go"); g.Match(&p) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// TestLinkInside: a symlink's text is admitted only when it cannot leave
// the repository or reach its metadata, however it is resolved.
func TestLinkInside(t *testing.T) {
	for _, c := range []struct {
		at, to string
		want   bool
	}{
		{"link", "README", true},
		{"src/link", "../README", true},
		{"a/b/link", "../../lib/x.go", true},
		{"a/b/link", "..", true},
		{"link", "..", false},
		{"link", "../outside", false},
		{"a/link", "../../outside", false},
		{"link", "/etc/passwd", false},
		{"link", "a/../../x", false}, // ".." after a name: through another link, anywhere
		{"link", "./x", false},
		{"link", "x//y", false},
		{"link", ".git/config", false},
		{"link", "sub/.GIT/hooks", false},
		{"link", ".git./config", false},
		{"link", "GIT~1/config", false},
		{"link", "x\x00y", false},
		{"link", "x\\y", false},
		{"link", "", false},
		{"../link", "x", false},
	} {
		if got := LinkInside(c.at, c.to); got != c.want {
			t.Errorf("LinkInside(%q, %q) = %v", c.at, c.to, got)
		}
	}
}

// FuzzLinkInside: whatever it admits, resolved lexically from the link's
// directory, stays at or under the root and names no .git.
func FuzzLinkInside(f *testing.F) {
	for _, s := range [][2]string{{"a/b/l", "../../x"}, {"l", "../x"}, {"a/l", "x/../../y"}, {"l", ".git"}, {"a/l", ".."}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, at, to string) {
		if !LinkInside(at, to) {
			return
		}
		dir := strings.Split(at, "/")
		stack := dir[:len(dir)-1]
		for _, c := range strings.Split(to, "/") {
			switch c {
			case "..":
				if len(stack) == 0 {
					t.Fatalf("%q at %q climbs out", to, at)
				}
				stack = stack[:len(stack)-1]
			case ".", "":
				t.Fatalf("%q admitted with an empty or dot component", to)
			default:
				if strings.EqualFold(strings.TrimRight(c, ". "), ".git") {
					t.Fatalf("%q names .git", to)
				}
				stack = append(stack, c)
			}
		}
	})
}
