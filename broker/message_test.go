package broker

import (
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestCommitMessageRefusesControls: the git_commit adapter refuses, at
// prepare and through the worker protocol, a message that would read
// otherwise than it is — terminal escapes, a carriage return drawing over
// the subject, C1 controls, bidi and zero-width format characters — or
// that vouches for a person; a plain message with newlines and tabs
// commits. Nothing refused moves the ref.
func TestCommitMessageRefusesControls(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)
	base := f.head()
	for name, msg := range map[string]string{
		"terminal title":      "fix\x1b]0;pwned\x07",
		"escape sequence":     "fix\x1b[2K\x1b[1ALGTM, reviewed by the maintainer",
		"carriage return":     "fix auth\rLGTM, reviewed by the maintainer",
		"C1 CSI":              "fix\u009b2K",
		"bidi override":       "fix \u202egnp.exe",
		"zero width space":    "fi\u200bx",
		"byte order mark":     "\ufefffix",
		"vertical tab":        "fix\vx",
		"signed-off-by":       "fix\n\nSigned-off-by: Linus Torvalds <torvalds@example.org>",
		"co-authored-by case": "fix\n\nco-AUTHORED-by: Someone <s@example.org>",
		"kernel trailer":      "fix\n\nAutonomic-Effect: 00000000-0000-0000-0000-000000000000",
		"invalid utf-8":       "fix \xff",
	} {
		t.Run(name, func(t *testing.T) {
			target := map[string]string{"base_oid": base, "ref": "refs/heads/main", "message": msg}
			wantErr(t, e.do(prepareReq(e, "git_commit", "repo", target, f.patch(fixAuth))), protocol.CodeInvalidField)
		})
	}
	if f.head() != base {
		t.Fatal("a refused message moved the ref")
	}
	ok := "Fix the auth check\n\n\tIt returned false for every caller.\nTrailing: words are fine"
	p := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", map[string]string{"base_oid": base, "ref": "refs/heads/main", "message": ok}, f.patch(fixAuth))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)))
	if got := sh(t, f.bare, "git", "log", "-1", "--format=%B", f.head()); !strings.HasPrefix(got, ok) {
		t.Fatalf("committed message %q", got)
	}
}

func TestMessageRune(t *testing.T) {
	for r, want := range map[rune]bool{'a': true, 'é': true, '\n': true, '\t': true, ' ': true, '漢': true, '\u00a0': true,
		'\r': false, 0: false, 0x1b: false, 0x7f: false, 0x85: false, 0x9b: false, 0x200b: false, 0x200e: false, 0x202e: false,
		0x2066: false, 0xfeff: false, 0xfffd: false} {
		if MessageRune(r) != want {
			t.Errorf("MessageRune(%U) = %v, want %v", r, !want, want)
		}
	}
}
