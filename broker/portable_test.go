package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
)

// TestCaseAndNormalisationCollisionsRefused: a change whose resulting tree
// holds two paths (or directories) equal after case folding and NFC —
// one file on macOS and Windows — is refused at prepare, and so is a name
// Windows cannot check out unless the target admits them; a rename that
// only changes case, and an ordinary file, land. The ref never moves on a
// refusal.
func TestCaseAndNormalisationCollisionsRefused(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)
	base := f.head()
	write := func(d string, files ...string) {
		for _, p := range files {
			full := filepath.Join(d, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte("x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, files := range map[string][]string{
		"case beside the base":  {"lib/AUTH.go"},
		"case in the change":    {"lib/calc.sh", "lib/CALC.sh"},
		"directories":           {"lib/Sub/a.go", "lib/sub/b.go"},
		"NFC and NFD":           {"lib/caf\u00e9.go", "lib/cafe\u0301.go"},
		"folded ß":              {"lib/stra\u00dfe.go", "lib/STRASSE.go"},
		"device name":           {"lib/CON"},
		"device with extension": {"lib/com1.txt"},
		"colon":                 {"lib/a:b"},
		"trailing dot":          {"lib/x."},
		"trailing space":        {"lib/x "},
		"reserved characters":   {"lib/a?b"},
	} {
		t.Run(name, func(t *testing.T) {
			patch := f.patch(func(d string) { write(d, files...) })
			wantErr(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), patch)), protocol.CodeForbidden)
		})
	}
	if f.head() != base {
		t.Fatal("a refused patch moved the ref")
	}
	// A rename that changes only case leaves one spelling: it lands, as
	// does an ordinary new file.
	for name, edit := range map[string]func(string){
		"case rename": func(d string) {
			if err := os.Rename(filepath.Join(d, "lib/auth.go"), filepath.Join(d, "lib/Auth.go")); err != nil {
				t.Fatal(err)
			}
		},
		"ordinary": func(d string) { write(d, "lib/other.go") },
	} {
		t.Run(name, func(t *testing.T) {
			mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(edit))))
		})
	}
	// A target that admits names Windows cannot check out: they pass;
	// collisions still do not.
	tg := gc.Targets["repo"]
	tg.AllowNonPortable = true
	gc.Targets["repo"] = tg
	mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(func(d string) { write(d, "lib/a:b") }))))
	wantErr(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(func(d string) { write(d, "lib/AUTH.go") }))), protocol.CodeForbidden)
}

func TestPortableName(t *testing.T) {
	for p, want := range map[string]bool{
		"src/main.go": true, "a/b.c.d": true, "console.log": true, "comma.txt": true, "lpt.txt": true,
		"CON": false, "x/con.txt": false, "Aux": false, "nul.tar.gz": false, "COM9": false, "lpt1": false,
		"a:b": false, "a<b": false, "x.": false, "x ": false, "a\x01b": false, `a\b`: false,
	} {
		if portableName(p) != want {
			t.Errorf("portableName(%q) = %v", p, !want)
		}
	}
}

// TestConcurrentRunsNeverCommitUnknown: runs that race on one ref from
// one base (two `autonomic run` at once) each commit their own new
// commit and swap the ref: exactly one lands, and every other is
// provably not committed (ref_moved, its commit unreachable from the
// ref), never commit_unknown; the ref holds the winner's commit.
func TestConcurrentRunsNeverCommitUnknown(t *testing.T) {
	f := newGitFixture(t)
	gc := &GitCommit{Targets: map[string]GitTarget{"repo": {Repo: f.bare, AllowedRefs: []string{"refs/heads/main"},
		AllowedPaths: []string{"lib/**"}}}}
	base := f.head()
	const n = 6
	reqs := make([]Request, n)
	for i := range reqs {
		name := "lib/run" + strconv.Itoa(i) + ".go"
		patch := f.patch(func(d string) { os.WriteFile(filepath.Join(d, name), []byte("package lib\n"), 0o644) })
		tb, _ := json.Marshal(gitTarget(base))
		reqs[i] = Request{EffectID: uuid.New(), Revision: 1, Epoch: 1, TargetID: "repo", Target: tb, Payload: patch}
	}
	results := make([]Result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = gc.Commit(context.Background(), reqs[i])
		}()
	}
	close(start)
	wg.Wait()
	won := -1
	for i, r := range results {
		switch r.Outcome {
		case Committed:
			if won >= 0 {
				t.Fatalf("two runs committed on one ref from one base: %d and %d", won, i)
			}
			won = i
		case NotCommitted:
			if protocol.AsWire(r.Err).Code != protocol.CodeRefMoved {
				t.Errorf("run %d not committed with %v, want ref_moved", i, r.Err)
			}
		default:
			t.Errorf("run %d: outcome %v (%v), want committed or not committed", i, r.Outcome, r.Err)
		}
	}
	if won < 0 {
		t.Fatal("no run landed")
	}
	if head := f.head(); head != results[won].Receipt["oid"] {
		t.Fatalf("the ref holds %s, the winner committed %v", head, results[won].Receipt["oid"])
	}
}

// TestRecoveryWithRemovedTarget: a kernel that restarts with an effect
// caught mid-commit on a target its configuration no longer has starts
// anyway: reconciliation reports the effect (target_removed) and leaves
// it commit_unknown for an operator, instead of refusing to start
// ("reconciliation incomplete … unknown git target").
func TestRecoveryWithRemovedTarget(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)
	// Committing is durable, the adapter is acting: the kernel "dies" here.
	p, release := cutOffInCommit(t, e, gc, f)
	defer release()

	cfg := e.cfg
	cfg.Adapters = nil // the restarted kernel's configuration has no git_commit target
	b2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b2.Reconcile(ctxT(t), uuid.Nil)
	if err != nil {
		t.Fatalf("a removed target stopped recovery: %v", err)
	}
	if !b2.Ready() {
		t.Fatal("the broker does not admit work after recovery")
	}
	var found bool
	for _, s := range st {
		if s.EffectID.String() == p.ID {
			found = true
			if s.To != store.CommitUnknown || s.Receipt["target_removed"] != true {
				t.Fatalf("settlement %+v", s)
			}
		}
	}
	if !found {
		t.Fatalf("the effect was not reported: %+v", st)
	}
	if eff, _ := e.store.Effect(ctxT(t), uuid.MustParse(p.ID)); eff.State != store.CommitUnknown {
		t.Fatalf("the effect is %s, want commit_unknown", eff.State)
	}
}

// TestNULPastGitsWindowIsBinary: git decides "binary" from a file's first
// 8000 bytes, so a file whose NUL comes later travels as a text hunk; the
// broker reads the whole patch and treats it as the binary change it is:
// refused on a target without allow_binary, admitted on one with it.
func TestNULPastGitsWindowIsBinary(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)
	base := f.head()
	patch := f.patch(func(d string) {
		os.WriteFile(filepath.Join(d, "lib/late.bin"), []byte(strings.Repeat("a", 9000)+"\x00b\n"), 0o644)
	})
	if bytes.Contains(patch, []byte("GIT binary patch")) || !bytes.Contains(patch, []byte{0}) {
		t.Fatal("the fixture's git did not send the file as a text hunk with its NUL")
	}
	wantErr(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), patch)), protocol.CodeForbidden)
	tg := gc.Targets["repo"]
	tg.AllowBinary = true
	gc.Targets["repo"] = tg
	mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), patch)))
}
