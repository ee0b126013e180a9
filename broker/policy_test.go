package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// policySpec is a signed policy's capability for the git fixture: class 3
// commits to "repo", class 2 artifacts to "reports", paths under lib/ and
// README (the target's own lists allow the same), one forbidden corner.
func policySpec() authority.Spec {
	return authority.Spec{MaxClass: authority.ClassAuthoritative,
		Grants: []authority.Grant{{Kind: "git_commit", Target: "repo", MaxClass: 3}, {Kind: "artifact", Target: "reports", MaxClass: 2}},
		Allow:  []string{"lib/**", "README"}, Forbid: []string{"lib/PRIVATE/**"},
		Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 30, EffectsPerMinute: 1000}}
}

// ready prepares and evaluates a git_commit on the current head.
func (e *env) readyCommit(t *testing.T, f *gitFixture, edit func(string)) *protocol.EffectResult {
	t.Helper()
	p := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), f.patch(edit))))
	return mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
}

// TestPolicyEnforcedWithoutVerification: with no verifier configured
// (automatic_verification off), a class 3 git_commit meets the whole lease
// at the commit horizon: paths against allow and forbid (folded), the
// default forbids, bytes_per_effect — each refused at commit, leaving the
// ref where it was and the effect ready.
func TestPolicyEnforcedWithoutVerification(t *testing.T) {
	f := newGitFixture(t)
	e := gitEnv(t, f, nil)
	if e.cfg.Verifier != nil {
		t.Fatal("this test needs automatic verification off")
	}
	write := func(name, body string, mode os.FileMode) func(string) {
		return func(d string) {
			p := filepath.Join(d, name)
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			_ = os.WriteFile(p, []byte(body), mode)
			_ = os.Chmod(p, mode)
		}
	}
	small := policySpec()
	small.Budget.BytesPerEffect = 64
	narrowAllow := policySpec()
	narrowAllow.Allow = []string{"lib/auth.go"}
	for _, tc := range []struct {
		name string
		spec authority.Spec
		edit func(string)
		code protocol.Code
	}{
		{"forbidden path (folded)", policySpec(), write("lib/private/key.go", "package private\n", 0o644), protocol.CodeForbidden},
		{"outside the lease's allow", narrowAllow, write("lib/new.go", "package lib\n", 0o644), protocol.CodeForbidden},
		{"default forbid: .gitattributes", policySpec(), write("lib/.gitattributes", "* filter=x\n", 0o644), protocol.CodeForbidden},
		{"default forbid: executable bit", policySpec(), func(d string) { _ = os.Chmod(filepath.Join(d, "lib/auth.go"), 0o755) }, protocol.CodeForbidden},
		// Prepare bounds what a patch adds (TestPatchBombRefused); a
		// deletion adds nothing, and its bytes are the commit horizon's.
		{"bytes_per_effect", small, func(d string) { _ = os.Remove(filepath.Join(d, "lib/auth.go")) }, protocol.CodeLimitExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.grantSpec(e.epoch(), tc.spec)
			base := f.head()
			p := e.readyCommit(t, f, tc.edit)
			wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), tc.code)
			if f.head() != base {
				t.Fatal("a refused commit moved the ref")
			}
			if s := mustOK(t, e.do(byEffectReq(e, protocol.WorkerStatus, p))); s.State != "ready" {
				t.Fatalf("refused commit left %s", s.State)
			}
		})
	}
	t.Run("within the lease it commits", func(t *testing.T) {
		e.grantSpec(e.epoch(), policySpec())
		p := e.readyCommit(t, f, fixAuth)
		if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != "committed" {
			t.Fatal(c.State)
		}
	})
}

// reportsEnv is an environment with a class 2 artifact target: the
// quickest effect to walk to the horizon.
func reportsEnv(t *testing.T) *env {
	dir := t.TempDir()
	return newEnv(t, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"reports": {Dir: dir, Class: 2}}})
	})
}

func (e *env) readyReport(t *testing.T, name string, body []byte) *protocol.EffectResult {
	t.Helper()
	p := mustOK(t, e.do(prepareReq(e, "artifact", "reports", map[string]string{"name": name}, body)))
	return mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
}

// TestBudgetTotalsEnforcedUnderRace: bytes_total is counted durably in
// the commit's own transaction. Twenty effects of 100 bytes race for a
// budget of 1000: exactly ten commit, the others are refused
// limit_exceeded, and the store's spend says 1000.
func TestBudgetTotalsEnforcedUnderRace(t *testing.T) {
	e := reportsEnv(t)
	spec := policySpec()
	spec.Budget.BytesTotal = 1000
	e.grantSpec(e.epoch(), spec)
	body := make([]byte, 100)
	var ready []*protocol.EffectResult
	for i := range 20 {
		copy(body, fmt.Sprintf("report %02d", i))
		ready = append(ready, e.readyReport(t, fmt.Sprintf("r%02d.bin", i), body))
	}
	var wg sync.WaitGroup
	results := make([]*protocol.WorkerResponse, len(ready))
	start := make(chan struct{})
	for i, p := range ready {
		req := byEffectReq(e, protocol.WorkerCommit, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = e.do(req)
		}()
	}
	close(start)
	wg.Wait()
	committed, refused := 0, 0
	for _, r := range results {
		switch {
		case r.OK && r.Result.State == "committed":
			committed++
		case !r.OK && r.Error.Code == protocol.CodeLimitExceeded:
			refused++
		default:
			t.Errorf("unexpected answer %+v %+v", r.Result, r.Error)
		}
	}
	if committed != 10 || refused != 10 {
		t.Fatalf("%d committed, %d refused: want 10 and 10", committed, refused)
	}
	if sp := e.spend(t); sp.Bytes != 1000 || sp.Effects != 10 || sp.LastMinute != 10 {
		t.Fatalf("durable spend %+v, want 1000 bytes in 10 effects", sp)
	}
}

// spend reads the episode's durable spend (store.Spend; BeginCommit reads
// the same rows under its locks).
func (e *env) spend(t *testing.T) store.Spend {
	t.Helper()
	s, err := e.store.Spend(ctxT(t), e.ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEffectsPerMinuteEnforced: effects_per_minute is counted durably;
// under a Throttle verdict (the homeostat's and the slow loop's
// contraction) the same lease allows half as many.
func TestEffectsPerMinuteEnforced(t *testing.T) {
	for _, tc := range []struct {
		name     string
		throttle bool
		want     int
	}{{"lease rate", false, 4}, {"throttled", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			e := reportsEnv(t)
			spec := policySpec()
			spec.Budget.EffectsPerMinute = 4
			e.grantSpec(e.epoch(), spec)
			if tc.throttle {
				e.verdict.set(authority.Signal{Source: authority.SourceInvariant, Action: authority.Throttle, Code: "homeostat"})
			}
			committed := 0
			for i := range 6 {
				p := e.readyReport(t, fmt.Sprintf("m%d.bin", i), []byte(fmt.Sprintf("minute %d", i)))
				r := e.do(byEffectReq(e, protocol.WorkerCommit, p))
				if r.OK {
					committed++
					continue
				}
				if r.Error.Code != protocol.CodeRateLimited {
					t.Fatalf("effect %d: %s, want rate_limited", i, r.Error.Code)
				}
			}
			if committed != tc.want {
				t.Fatalf("%d committed in a minute, want %d", committed, tc.want)
			}
		})
	}
}

// TestRepairNarrowingEnforcedAtCommit: a repair lease is the previous
// lease intersected with the spec's repair capability (as the episode
// controller mints it); its smaller allow set and byte budget are what
// the commit horizon enforces after the epoch advanced.
func TestRepairNarrowingEnforcedAtCommit(t *testing.T) {
	f := newGitFixture(t)
	e := gitEnv(t, f, nil)
	prev := authority.MustCompile(policySpec())
	e.grantCap(e.epoch(), prev)
	p := e.readyCommit(t, f, fixAuth)
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)))
	f.follow()
	spent := e.spend(t).Bytes

	if _, err := e.store.AdvanceEpoch(ctxT(t), store.AdvanceEpoch{EpisodeID: e.ep.ID, FromEpoch: e.epoch(), Reason: "repair"}); err != nil {
		t.Fatal(err)
	}
	next := f.patch(func(d string) {
		_ = os.WriteFile(filepath.Join(d, "lib/auth.go"), []byte("package lib\n\nfunc Check() bool { return 1 == 1 }\n"), 0o644)
	})
	narrow := authority.MustCompile(authority.Spec{MaxClass: authority.ClassAuthoritative,
		Grants: []authority.Grant{{Kind: "git_commit", Target: "repo", MaxClass: 3}}, Allow: []string{"lib/auth.go"}, Forbid: []string{},
		Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: spent + int64(len(next)) + 10, EffectsPerMinute: 1000}})
	e.grantCap(e.epoch(), authority.Intersect(prev, narrow))

	// Allowed by the policy, outside the repair's allow set.
	out := e.readyCommit(t, f, func(d string) { _ = os.WriteFile(filepath.Join(d, "lib/new.go"), []byte("package lib\n"), 0o644) })
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, out)), protocol.CodeForbidden)
	// Inside it, within its budget.
	in := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), next)))
	in = mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, in)))
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, in)))
	f.follow()
	// Inside it, beyond its byte budget (the policy's is far larger).
	over := e.readyCommit(t, f, fixAuth)
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, over)), protocol.CodeLimitExceeded)
}

// grantCap grants a lease for an already compiled capability.
func (e *env) grantCap(epoch int64, c authority.Capability) {
	e.t.Helper()
	doc, err := authority.EncodeLease(c)
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := e.store.GrantLease(ctxT(e.t), store.LeaseGrant{EpisodeID: e.ep.ID, Epoch: epoch, Capabilities: doc, TTL: 3600e9})
	if err != nil {
		e.t.Fatal(err)
	}
	e.lease = l
}

// follow moves the scratch clone to the authoritative head, so the next
// patch applies there.
func (f *gitFixture) follow() {
	sh(f.t, f.work, "git", "fetch", "-q", f.bare, "main")
	sh(f.t, f.work, "git", "reset", "-q", "--hard", "FETCH_HEAD")
}
