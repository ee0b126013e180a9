package broker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/verify"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
)

// TestVerificationPerKind: automatic verification has a rule per adapter
// kind — git_commit by tests, the kinds the configuration names in
// unverified_kinds by none — and a kind without one is denied with a
// reason that names it. With verification on (the kernel's runner as the
// broker's Verifier), an http_mutation, a git_remote push and a class 4
// artifact (after its human approval) commit.
func TestVerificationPerKind(t *testing.T) {
	none := []string{"git_remote", "http_mutation", "artifact"}
	for kind, want := range map[string]string{"git_commit": verify.RuleTests, "git_remote": verify.RuleNone,
		"http_mutation": verify.RuleNone, "artifact": verify.RuleNone} {
		if got, ok := verify.Rule(kind, none); !ok || got != want {
			t.Errorf("rule for %s: %q, want %q", kind, got, want)
		}
	}
	if got, ok := verify.Rule("git_commit", []string{"git_commit"}); got != verify.RuleTests || !ok {
		t.Error("git_commit lost its tests")
	}

	// Not named: denied, and the recorded reason names the kind.
	strict := &verify.Runner{}
	for _, kind := range none {
		v, body, err := strict.Verify(context.Background(), store.Effect{ID: uuid.New(), Kind: kind}, []byte("x"))
		if err != nil || v != store.VerdictDeny || !strings.Contains(string(body), "no verification for kind "+kind) {
			t.Fatalf("%s without a rule: %s %s %v", kind, v, body, err)
		}
	}

	f := newGitFixture(t)
	remote := filepath.Join(t.TempDir(), "pub.git")
	sh(t, filepath.Dir(remote), "git", "clone", "-q", "--bare", f.bare, remote)
	base := f.head()
	sh(t, f.work, "git", "reset", "-q", "--hard")
	_ = os.WriteFile(filepath.Join(f.work, "README"), []byte("v2\n"), 0o644)
	sh(t, f.work, "git", "commit", "-qam", "v2")
	sh(t, f.work, "git", "push", "-q", f.bare, "HEAD:refs/heads/main")
	next := f.head()
	srv := newMutationServer(t)
	defer srv.Close()
	pub := t.TempDir()
	for _, tc := range []struct {
		name   string
		runner *verify.Runner
		ok     bool
	}{{"kinds named in unverified_kinds", &verify.Runner{Unverified: none}, true}, {"no rule", strict, false}} {
		t.Run(tc.name, func(t *testing.T) {
			sh(t, remote, "git", "update-ref", "refs/heads/main", base)
			e := newEnv(t, func(e *env, cfg *Config) {
				cfg.Adapters = append(cfg.Adapters, httpAdapters(srv.URL, e.payloads)...)
				cfg.Adapters = append(cfg.Adapters, &GitRemote{Targets: map[string]GitRemoteTarget{
					"pub": {Repo: f.bare, URL: remote, AllowedRefs: []string{"refs/heads/main"}}}})
				cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"releases": {Dir: pub}}})
				cfg.Verifier = tc.runner.Verify
			})
			walk := func(name string, p *protocol.EffectResult, class4 bool) {
				t.Helper()
				r := e.do(byEffectReq(e, protocol.WorkerEvaluate, p))
				if !tc.ok {
					wantErr(t, r, protocol.CodeForbidden)
					return
				}
				mustOK(t, r)
				if class4 {
					req := byEffectReq(e, protocol.WorkerEvaluate, p)
					req.Approval = e.approve(p.ID)
					mustOK(t, e.do(req))
				}
				c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)))
				if c.State != "committed" {
					t.Fatalf("%s: %s", name, c.State)
				}
				ds, err := e.store.Decisions(ctxT(t), mustUUID(p.ID))
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					var b verify.Body
					if d.Kind == store.DecisionVerification && json.Unmarshal(d.Body, &b) == nil && strings.Contains(b.Reason, "unverified_kinds") {
						return
					}
				}
				t.Fatalf("%s: no recorded verification naming its rule in %+v", name, ds)
			}
			walk("http_mutation", mustOK(t, e.do(prepareReq(e, "http_mutation", "api",
				map[string]string{"method": "POST", "path": "/items", "content_type": "application/json"}, []byte(`{"n":1}`)))), false)
			walk("git_remote", mustOK(t, e.do(prepareReq(e, "git_remote", "pub",
				map[string]string{"ref": "refs/heads/main", "oid": next, "expected_remote_oid": base}, nil))), false)
			walk("class 4 artifact", mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "v.bin"}, []byte("v")))), true)
		})
	}
}
