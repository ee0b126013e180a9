package broker

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestCheckedOutBranchRefused: a ref that is a work tree's checked-out
// branch — a non-bare target's own HEAD, or a linked worktree's — is
// refused before anything is built and again at the commit's
// precondition; the same patch on a branch no work tree has checked out
// is accepted. (Landing under a work tree left its index reversed: the
// user's next `git commit -a` reverted the fix.)
func TestCheckedOutBranchRefused(t *testing.T) {
	f := newGitFixture(t)
	patch := f.patch(fixAuth)
	base := sh(t, f.work, "git", "rev-parse", "HEAD")
	sh(t, f.work, "git", "branch", "agent/x")
	sh(t, f.bare, "git", "branch", "feature")
	sh(t, f.bare, "git", "worktree", "add", "-q", filepath.Join(t.TempDir(), "linked"), "feature")
	refs := []string{"refs/heads/main", "refs/heads/agent/x", "refs/heads/feature"}
	g := &GitCommit{Targets: map[string]GitTarget{
		"work": {Repo: filepath.Join(f.work, ".git"), AllowedRefs: refs, AllowedPaths: []string{"lib/**"}},
		"bare": {Repo: f.bare, AllowedRefs: refs, AllowedPaths: []string{"lib/**"}},
	}}
	req := func(target, ref string) Request {
		b, _ := json.Marshal(map[string]string{"base_oid": base, "ref": ref, "message": "fix"})
		return Request{TargetID: target, Target: b, Payload: patch, PayloadDigest: Digest(patch)}
	}
	ctx := context.Background()
	for _, c := range []struct {
		target, ref string
		refused     bool
	}{
		{"work", "refs/heads/main", true},     // the non-bare repository's HEAD
		{"bare", "refs/heads/feature", true},  // a linked worktree's
		{"work", "refs/heads/agent/x", false}, // a branch nobody has checked out
		{"bare", "refs/heads/main", false},    // a bare repository's HEAD has no work tree
	} {
		r := req(c.target, c.ref)
		for step, err := range map[string]error{"validate": g.Validate(ctx, r), "precondition": g.Precondition(ctx, r)} {
			got := protocol.AsWire(err).Code == protocol.CodeForbidden
			if got != c.refused {
				t.Errorf("%s %s at %s: %v (want refused=%v)", c.target, c.ref, step, err, c.refused)
			}
		}
	}
}
