package broker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestNTFSSpellingsRefused: a patch that adds a path NTFS or HFS+ reads as
// .git is refused at prepare even in a target repository that turned
// git's own protection off (core.protectNTFS=false in its config): the
// broker pins core.protectNTFS and core.protectHFS for every git it runs.
// The ref never moves.
func TestNTFSSpellingsRefused(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)
	sh(t, f.bare, "git", "config", "core.protectNTFS", "false")
	sh(t, f.bare, "git", "config", "core.protectHFS", "false")
	sh(t, f.work, "git", "config", "core.protectNTFS", "false")
	sh(t, f.work, "git", "config", "core.protectHFS", "false")
	base := f.head()
	for _, name := range []string{"GIT~1", ".git.", ".git ", "git~1", ".git::$INDEX_ALLOCATION", ".g\u200cit"} {
		t.Run(name, func(t *testing.T) {
			patch := f.patch(func(d string) {
				dir := filepath.Join(d, "lib", name)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				_ = os.WriteFile(filepath.Join(dir, "config"), []byte("[core]\n\tfsmonitor = /tmp/x\n"), 0o644)
			})
			wantErr(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), patch)), protocol.CodeForbidden)
		})
	}
	if f.head() != base {
		t.Fatal("a refused patch moved the ref")
	}
}
