package pathglob

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzMatchAgreesWithReference: for every glob that compiles and every
// path that splits, the greedy matcher agrees with the recursive
// path.Match reference segment by segment; a glob that does not compile
// is refused with ErrMalformed; Match never panics.
func FuzzMatchAgreesWithReference(f *testing.F) {
	for _, s := range [][2]string{
		{"lib/**", "lib/a/b.go"}, {"**/*secret*", "a/my_secret"}, {"a/**/b/**/c", "a/x/b/y/z/c"}, {"[a-c]?/x", "b1/x"},
		{"secrets[/**", "secrets[/x"}, {"**", "a"}, {"*.md", "README.md"}, {"a/**/**/b", "a/b"}, {"\\*", "*"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pat, name string) {
		g, err := Compile(pat)
		if err != nil {
			if !strings.Contains(err.Error(), ErrMalformed.Error()) {
				t.Fatalf("%q: refusal %v does not wrap ErrMalformed", pat, err)
			}
			if g.MatchString(name) {
				t.Fatalf("a refused glob matched")
			}
			return
		}
		var p Path
		if !p.Split(name) {
			if g.MatchString(name) {
				t.Fatalf("%q matched an invalid path %q", pat, name)
			}
			return
		}
		if !utf8.ValidString(name) || strings.ContainsAny(name, "\x00\\\n") {
			t.Fatalf("invalid name %q split", name)
		}
		if got, want := g.Match(&p), refMatch(strings.Split(pat, "/"), strings.Split(name, "/")); got != want {
			t.Fatalf("%q ~ %q = %v, reference says %v", pat, name, got, want)
		}
	})
}
