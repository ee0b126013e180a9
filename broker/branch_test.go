package broker

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestOneBranchPerRun: under an allowed ref prefix, a request that says
// create lands on a new branch at its base, so runs started from the same
// base at once both land, each on its own ref; creating a ref that exists
// is ref_moved (the compare-and-swap is against absence), and reconciling
// a create whose ref never appeared is not committed. A ref outside the
// prefixes, or a tail git or a terminal could misread, is refused.
func TestOneBranchPerRun(t *testing.T) {
	f := newGitFixture(t)
	base := f.head()
	patch := f.patch(fixAuth)
	g := &GitCommit{Targets: map[string]GitTarget{"repo": {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"},
		AllowedRefPrefixes: []string{"refs/heads/agent/"}, AllowedPaths: []string{"lib/**"}}}}
	req := func(ref string, create bool) Request {
		b, _ := json.Marshal(map[string]any{"base_oid": base, "ref": ref, "message": "fix", "create": create})
		return Request{EffectID: uuid.Must(uuid.NewV7()), TargetID: "repo", Target: b, Payload: patch, PayloadDigest: Digest(patch)}
	}
	ctx := context.Background()
	refs := []string{"refs/heads/agent/codex/0a1b2c3d", "refs/heads/agent/claude/4e5f6a7b"}
	var wg sync.WaitGroup
	results := make([]Result, len(refs))
	for i, ref := range refs {
		wg.Go(func() {
			r := req(ref, true)
			if err := g.Precondition(ctx, r); err != nil {
				results[i] = notCommitted(err, nil)
				return
			}
			results[i] = g.Commit(ctx, r)
		})
	}
	wg.Wait()
	for i, res := range results {
		if res.Outcome != Committed {
			t.Fatalf("%s: %v %v", refs[i], res.Outcome, res.Err)
		}
		if parent := sh(t, f.bare, "git", "rev-parse", refs[i]+"^"); parent != base {
			t.Errorf("%s is not on the base", refs[i])
		}
	}
	if f.head() != base {
		t.Error("main moved")
	}
	// The ref exists now: creating it again is a moved ref, not a commit.
	again := req(refs[0], true)
	if err := g.Precondition(ctx, again); protocol.AsWire(err).Code != protocol.CodeRefMoved {
		t.Errorf("precondition of a second create: %v", err)
	}
	if res := g.Commit(ctx, again); res.Outcome != NotCommitted || protocol.AsWire(res.Err).Code != protocol.CodeRefMoved {
		t.Errorf("a second create: %v %v", res.Outcome, res.Err)
	}
	// A create whose ref never appeared reconciles as not committed.
	if res := g.Reconcile(ctx, req("refs/heads/agent/codex/never", true)); res.Outcome != NotCommitted {
		t.Errorf("reconcile of an absent create: %v %v", res.Outcome, res.Err)
	}
	// Without create, a missing ref is not the base: the precondition fails.
	if err := g.Precondition(ctx, req("refs/heads/agent/x/absent", false)); protocol.AsWire(err).Code != protocol.CodeRefMoved {
		t.Errorf("an update of a missing ref: %v", err)
	}
	for _, ref := range []string{"refs/heads/other/x", "refs/heads/agent/", "refs/heads/agent/../main", "refs/heads/agent/x.lock",
		"refs/heads/agent/.hidden", "refs/heads/agent/-opt", "refs/heads/agent/a//b", "refs/heads/agent/a b", "refs/heads/agent/x\x1b[2J",
		"refs/heads/agent/a/b/c/d/e", "refs/heads/agent/" + strings.Repeat("x", 65)} {
		if err := g.Validate(ctx, req(ref, true)); protocol.AsWire(err).Code != protocol.CodeForbidden {
			t.Errorf("%q: %v, want forbidden", ref, err)
		}
	}
}
