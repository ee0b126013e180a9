package broker

import (
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestGrantCarriesRefs: a lease whose git_commit grant names refs (what
// `autonomic run` signs: its own ref only) commits to those refs and to
// no other the target allows: a commit to another allowed ref is refused
// at the commit horizon (forbidden, ref_not_granted) and the ref does not
// move; the granted ref lands.
func TestGrantCarriesRefs(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)
	tg := gc.Targets["repo"]
	tg.AllowedRefs = []string{"refs/heads/main", "refs/heads/agent/codex"}
	gc.Targets["repo"] = tg
	spec := wideSpec()
	for i := range spec.Grants {
		if spec.Grants[i].Kind == "git_commit" {
			spec.Grants[i].Refs = []string{"refs/heads/agent/codex"}
		}
	}
	e.grantSpec(e.epoch(), spec)
	base := f.head()
	sh(t, f.bare, "git", "update-ref", "refs/heads/agent/codex", base)

	target := gitTarget(base) // refs/heads/main: the target allows it, the grant does not
	p := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", target, f.patch(fixAuth))))
	if r := e.do(byEffectReq(e, protocol.WorkerEvaluate, p)); r.OK {
		r = e.do(byEffectReq(e, protocol.WorkerCommit, p))
		wantErr(t, r, protocol.CodeForbidden)
		if r.Error.Message == "" {
			t.Error("no reason")
		}
	}
	if f.head() != base {
		t.Fatal("a commit to a ref the grant does not name moved it")
	}

	target["ref"] = "refs/heads/agent/codex"
	p = mustOK(t, e.do(prepareReq(e, "git_commit", "repo", target, f.patch(fixAuth))))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
	if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != "committed" {
		t.Fatalf("the granted ref: %s", c.State)
	}
	if sh(t, f.bare, "git", "rev-parse", "refs/heads/agent/codex") == base {
		t.Fatal("the granted ref did not move")
	}
}

// TestGrantRefsAlgebra: refs intersect (absent is any ref; disjoint refs
// leave no grant), and Check admits exactly the granted refs.
func TestGrantRefsAlgebra(t *testing.T) {
	mk := func(refs ...string) authority.Capability {
		return authority.MustCompile(authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3, Refs: refs}},
			Allow: []string{"**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 30, EffectsPerMinute: 10}})
	}
	check := func(c authority.Capability, ref string) authority.Reason {
		return c.Check(&authority.Request{Class: 3, Kind: "git_commit", Target: "repo", Ref: ref, Bytes: 1})
	}
	any, a, ab, b := mk(), mk("refs/heads/a"), mk("refs/heads/a", "refs/heads/b"), mk("refs/heads/b")
	for _, c := range []struct {
		name string
		cap  authority.Capability
		ref  string
		want authority.Reason
	}{
		{"any ref", any, "refs/heads/x", authority.Allowed},
		{"granted", a, "refs/heads/a", authority.Allowed},
		{"not granted", a, "refs/heads/b", authority.DenyRef},
		{"no ref named", a, "", authority.DenyRef},
		{"any ∩ a", authority.Intersect(any, a), "refs/heads/b", authority.DenyRef},
		{"ab ∩ b", authority.Intersect(ab, b), "refs/heads/b", authority.Allowed},
		{"ab ∩ b, a", authority.Intersect(ab, b), "refs/heads/a", authority.DenyRef},
		{"a ∩ b", authority.Intersect(a, b), "refs/heads/a", authority.DenyNoGrant},
	} {
		if got := check(c.cap, c.ref); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	for _, bad := range []string{"main", "refs/heads/a..b", "refs/heads/a b", "refs/heads/", "refs/heads/x.lock", "refs/heads/a@{1}"} {
		if _, err := authority.Compile(authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3, Refs: []string{bad}}}}); err == nil {
			t.Errorf("ref %q compiled", bad)
		}
	}
	// Recorded and read back as the lease row holds it.
	doc, err := authority.EncodeLease(a)
	if err != nil {
		t.Fatal(err)
	}
	back, err := authority.DecodeLease(doc)
	if err != nil || check(back, "refs/heads/b") != authority.DenyRef || check(back, "refs/heads/a") != authority.Allowed {
		t.Fatalf("lease round trip: %v", err)
	}
}
