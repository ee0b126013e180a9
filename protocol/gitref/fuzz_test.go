package gitref

import (
	"os/exec"
	"testing"
)

// FuzzTail: every tail Tail accepts, under refs/heads/agent/, is a ref
// name git itself accepts, and has no byte a terminal or shell treats
// specially.
func FuzzTail(f *testing.F) {
	for _, s := range []string{"codex/0a1b2c3d", "a", "a.b", "x.lock", "..", "a//b", ".h", "-o", "a b", "a\x1b", "a/b/c/d/e", "é"} {
		f.Add(s)
	}
	git, err := exec.LookPath("git")
	if err != nil {
		f.Fatal("git is needed to check ref names against")
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !Tail(s) {
			return
		}
		for i := 0; i < len(s); i++ {
			if b := s[i]; b <= ' ' || b >= 0x7f || b == '~' || b == '^' || b == ':' || b == '?' || b == '*' || b == '[' || b == '\\' || b == '@' {
				t.Fatalf("%q accepted with byte %q", s, b)
			}
		}
		if out, err := exec.Command(git, "check-ref-format", "refs/heads/agent/"+s).CombinedOutput(); err != nil {
			t.Fatalf("%q accepted, git refuses it: %v %s", s, err, out)
		}
	})
}

func TestTail(t *testing.T) {
	for s, want := range map[string]bool{"codex/0a1b2c3d": true, "claude/x_y-z.1": true, "": false, "a/": false, "/a": false,
		"a..b": false, "a/.b": false, "a/-b": false, "x.lock": false, "x.": false, "a/b/c/d": true, "a/b/c/d/e": false,
		"a b": false, "a\x1b[2J": false, "é": false, string(make([]byte, 65)): false} {
		if Tail(s) != want {
			t.Errorf("Tail(%q) = %v", s, !want)
		}
	}
	for p, want := range map[string]bool{"refs/heads/agent/": true, "refs/heads/agent": false, "refs/tags/x/": false, "refs/heads/": false,
		"refs/heads/a/b/": true, "refs/heads/../": false} {
		if Prefix(p) != want {
			t.Errorf("Prefix(%q) = %v", p, !want)
		}
	}
}
