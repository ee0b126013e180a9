package broker

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"golang.org/x/sys/unix"
)

// snapshot is everything a prepare could write: the repository's object
// files (quarantines included), the payload store, and the episode's
// effects and ledger.
type snapshot struct {
	objects, payloads []string
	effects, events   int
}

func listFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func (e *env) snapshot(repo string) snapshot {
	e.t.Helper()
	effs, err := e.store.ListEffects(ctxT(e.t), e.ep.ID, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	evs, err := e.store.Events(ctxT(e.t), e.ep.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return snapshot{objects: listFiles(e.t, filepath.Join(repo, "objects")), payloads: listFiles(e.t, e.payloads.dir),
		effects: len(effs), events: len(evs)}
}

func (s snapshot) same(t testing.TB, after snapshot) {
	t.Helper()
	if strings.Join(s.objects, ",") != strings.Join(after.objects, ",") {
		t.Errorf("repository objects changed: %d files → %d", len(s.objects), len(after.objects))
	}
	if strings.Join(s.payloads, ",") != strings.Join(after.payloads, ",") {
		t.Errorf("payload store changed: %v → %v", s.payloads, after.payloads)
	}
	if s.effects != after.effects || s.events != after.events {
		t.Errorf("tables changed: effects %d → %d, events %d → %d", s.effects, after.effects, s.events, after.events)
	}
}

// TestPrepareFencedFirst: the epoch, the lease's validity and its grant are
// checked before the adapter applies anything or the payload is stored. A
// prepare refused for a stale epoch, a revoked lease or a target the lease
// does not grant leaves the repository's objects, the payload store and the
// tables exactly as they were. (Before the fence moved first, the stale and
// revoked prepares wrote their patch's objects and the revoked one's
// payload was stored.)
func TestPrepareFencedFirst(t *testing.T) {
	f := newGitFixture(t)
	e := gitEnv(t, f, nil)
	patch := func(name string) []byte {
		return f.patch(func(d string) {
			_ = os.WriteFile(filepath.Join(d, "lib", name), []byte(strings.Repeat("package lib // "+name+"\n", 1000)), 0o644)
		})
	}
	grantOnly := func(target string) {
		caps, _ := json.Marshal(Capabilities{Effects: []Capability{{Kind: "git_commit", TargetID: target, MaxClass: 3}}})
		l, err := e.store.GrantLease(ctxT(t), store.LeaseGrant{EpisodeID: e.ep.ID, Epoch: e.epoch(), Capabilities: caps, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		e.lease = l
	}
	cases := []struct {
		name string
		set  func() *protocol.WorkerRequest
		code protocol.Code
	}{
		{"stale epoch", func() *protocol.WorkerRequest {
			req := prepareReq(e, "git_commit", "repo", gitTarget(f.head()), patch("a.go"))
			if _, err := e.store.AdvanceEpoch(ctxT(t), store.AdvanceEpoch{EpisodeID: e.ep.ID, FromEpoch: req.Epoch, Reason: "fence"}); err != nil {
				t.Fatal(err)
			}
			return req // the old epoch and its (now revoked) lease
		}, protocol.CodeStaleRequestEpoch},
		{"revoked lease", func() *protocol.WorkerRequest {
			e.grant(e.epoch())
			if _, err := e.store.RevokeLease(ctxT(t), e.lease.ID, "test"); err != nil {
				t.Fatal(err)
			}
			return prepareReq(e, "git_commit", "repo", gitTarget(f.head()), patch("b.go"))
		}, protocol.CodeStaleAuthority},
		{"wrong target", func() *protocol.WorkerRequest {
			grantOnly("elsewhere")
			return prepareReq(e, "git_commit", "repo", gitTarget(f.head()), patch("c.go"))
		}, protocol.CodeForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.set()
			before := e.snapshot(f.bare)
			wantErr(t, e.do(req), c.code)
			before.same(t, e.snapshot(f.bare))
		})
	}
	// The same patch under a live lease is prepared, and still writes no
	// object into the repository (its objects lived in a quarantine).
	e.grant(e.epoch())
	before := e.snapshot(f.bare)
	mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), patch("d.go"))))
	after := e.snapshot(f.bare)
	if strings.Join(before.objects, ",") != strings.Join(after.objects, ",") || after.effects != before.effects+1 || len(after.payloads) != len(before.payloads)+1 {
		t.Fatalf("prepare: objects %d → %d, effects %d → %d, payloads %d → %d", len(before.objects), len(after.objects),
			before.effects, after.effects, len(before.payloads), len(after.payloads))
	}
}

// TestGitCommitRefusesHiddenNames: git accepts a path with a zero-width
// character (".g\u200cit/hooks/…" reads as ".git/hooks/…") or a newline;
// the adapter refuses any path of the result with a control character or
// an invisible code point, wherever the allow globs would admit it.
func TestGitCommitRefusesHiddenNames(t *testing.T) {
	f := newGitFixture(t)
	e := newEnv(t, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &GitCommit{Targets: map[string]GitTarget{"repo": {Repo: f.bare,
			AllowedRefs: []string{"refs/heads/main"}, AllowedPaths: []string{"**"}}}})
	})
	for _, name := range []string{".g\u200cit/hooks/pre-commit", "lib/a\nb.go", "lib/\u202egol.exe", "lib/x\u00a0y", "lib/\u3164", "lib/a\x7f"} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			p := f.patch(func(d string) {
				_ = os.MkdirAll(filepath.Dir(filepath.Join(d, name)), 0o755)
				_ = os.WriteFile(filepath.Join(d, name), []byte("x\n"), 0o644)
			})
			wantErr(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), p)), protocol.CodeForbidden)
		})
	}
	mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(f.head()), f.patch(func(d string) {
		_ = os.WriteFile(filepath.Join(d, "lib", "naïve café.go"), []byte("package lib\n"), 0o644)
	}))))
}

// TestPreparePayloadNotStored: the payload is stored while the proposal's
// transaction runs; when storing it fails the prepare fails and the effect
// the transaction recorded is aborted, never left prepared without its
// payload. The payload directory is made immutable (FS_IMMUTABLE_FL binds
// root too), so the store's write fails as a full or broken disk would.
func TestPreparePayloadNotStored(t *testing.T) {
	const immutable = 0x10 // FS_IMMUTABLE_FL, <linux/fs.h>
	privileged.Require(t)
	pub := t.TempDir()
	e := newEnv(t, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"releases": {Dir: pub}}})
	})
	setImmutable := func(on bool) {
		fd, err := unix.Open(e.payloads.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		if err != nil {
			privileged.Skip(t, "the payload directory has no inode flags (FS_IOC_GETFLAGS): "+err.Error())
		}
		if on {
			flags |= immutable
		} else {
			flags &^= immutable
		}
		if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
			t.Fatalf("FS_IOC_SETFLAGS: %v", err)
		}
	}
	setImmutable(true)
	t.Cleanup(func() { setImmutable(false) })
	body := []byte("a body the payload store cannot take")
	wantErr(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "refused"}, body)), protocol.CodeInternal)
	effects, err := e.store.ListEffects(ctxT(t), e.ep.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(effects) != 1 || effects[0].State != store.Aborted {
		t.Fatalf("after a failed payload store the recorded effect must be aborted: %+v", effects)
	}
	// Once the store takes writes again the same body prepares and commits.
	setImmutable(false)
	p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "stored"}, body)))
	ev := byEffectReq(e, protocol.WorkerEvaluate, p)
	ev.Approval = e.approve(p.ID)
	mustOK(t, e.do(ev))
	if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != "committed" {
		t.Fatalf("commit: %s", c.State)
	}
}
