package broker

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

const crashChildEnv = "AUTONOMIC_BROKER_CRASH_CHILD"

// crashSpec tells a child "kernel" which effect to commit and where to die.
type crashSpec struct {
	URL, AdminURL string
	Payloads      string
	EffectID      uuid.UUID
	Point         string // after_intent, before_adapter, after_adapter
	ArtifactDir   string
	GitRepo       string
	HTTPURL       string
	RemoteURL     string
	ReadURL       string
	DecisionKey   ed25519.PublicKey
	// Worker: commit as the episode's worker does (Broker.Handle), not
	// as the kernel does (Broker.Commit): the two reach commit_intent by
	// different transactions (commitInEpisode).
	Worker bool
}

func (s crashSpec) adapters(pl *Payloads) []Adapter {
	var out []Adapter
	if s.ArtifactDir != "" {
		out = append(out, &Artifact{Targets: map[string]ArtifactTarget{"releases": {Dir: s.ArtifactDir}}})
	}
	if s.GitRepo != "" && s.RemoteURL == "" {
		out = append(out, &GitCommit{Targets: map[string]GitTarget{"repo": {Repo: s.GitRepo, AllowedRefs: []string{"refs/heads/main"},
			AllowedPaths: []string{"lib/**", "README"}}}})
	}
	if s.RemoteURL != "" {
		out = append(out, &GitRemote{Targets: map[string]GitRemoteTarget{"pub": {Repo: s.GitRepo, URL: s.RemoteURL, AllowedRefs: []string{"refs/heads/main"}}}})
	}
	if s.ReadURL != "" {
		out = append(out, httpAdapters(s.ReadURL, pl)[0])
	}
	if s.HTTPURL != "" {
		out = append(out, httpAdapters(s.HTTPURL, pl)...)
	}
	return out
}

// crashChild is the kernel that dies: it commits one effect and SIGKILLs
// itself at the named point. Exit 0 means it did not die, which the parent
// treats as failure.
func crashChild() int {
	var spec crashSpec
	if err := json.Unmarshal([]byte(os.Getenv(crashChildEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, store.Config{URL: spec.URL, InstanceID: "kernel-a", OwnerTTL: time.Hour})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	pl, err := OpenPayloads(spec.Payloads)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	die := func(point string) func(store.Effect) {
		return func(store.Effect) {
			if spec.Point == point {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Hour)
			}
		}
	}
	hooks := &Hooks{AfterIntent: die("after_intent"), BeforeAdapter: die("before_adapter")}
	hooks.AfterAdapter = func(e store.Effect, _ Result) { die("after_adapter")(e) }
	b, err := New(Config{Store: s, Payloads: pl, Adapters: spec.adapters(pl), Hooks: hooks,
		DecisionKeys: map[string]ed25519.PublicKey{"operator": spec.DecisionKey}, RegimeMaxClass: DefaultRegimeMaxClass(),
		LeaseCheck: (&testVerdict{}).check})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	e, err := s.Effect(ctx, spec.EffectID)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	// A kernel process of its own: it drives the episode once it holds
	// the lease (which names the process).
	if _, err := s.AcquireOwnership(ctx, e.EpisodeID); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if spec.Worker {
		// As a kernel starts: reconciliation first (the parent settled
		// everything before it started this child, so this finds nothing),
		// and only then does the broker admit a worker's request.
		if _, err := b.Reconcile(ctx, uuid.Nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		r := b.Handle(ctx, e.EpisodeID, &protocol.WorkerRequest{Protocol: protocol.WorkerVersion, RequestID: "crash",
			Epoch: e.Epoch, Action: protocol.WorkerCommit, EffectID: e.ID.String(), Revision: e.Revision})
		fmt.Fprintln(os.Stderr, "child survived:", r.Error)
		return 0
	}
	_, err = b.Commit(ctx, e, e.Revision, e.Epoch)
	fmt.Fprintln(os.Stderr, "child survived:", err)
	return 0
}

// runCrash commits eff in a child kernel that dies at point.
func (e *env) runCrash(spec crashSpec) {
	e.t.Helper()
	spec.URL, spec.AdminURL = e.cluster.KernelConnString(e.db), e.cluster.AdminConnString(e.db)
	spec.Payloads = filepath.Join(e.dir, "payloads")
	spec.DecisionKey = e.cfg.DecisionKeys["operator"]
	b, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+string(b))
	out, err := cmd.CombinedOutput()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		e.t.Fatalf("child kernel did not die at %s: %v\n%s", spec.Point, err, out)
	}
	// The dead child's ownership lease lapses (its TTL's wait, skipped):
	// the parent's reconciliation takes the episode back.
	conn, err := pgx.Connect(ctxT(e.t), e.cluster.AdminConnString(e.db))
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctxT(e.t), `UPDATE episodes SET owner_expires_at = clock_timestamp()`); err != nil {
		e.t.Fatal(err)
	}
}

// TestBrokerCrashAfterExternalMutationReconciliation is the
// broker_crash_after_external_mutation_reconciliation gate: for each
// adapter, the kernel dies between the adapter's action and the record of
// its outcome (and at the two points before it), committing as the kernel
// and as the episode's worker; a restarted broker reconciles to the
// provable outcome and never acts twice.
func TestBrokerCrashAfterExternalMutationReconciliation(t *testing.T) {
	type adapterCase struct {
		name   string
		setup  func(t *testing.T) (crashSpec, func(e *env, seq int) *protocol.EffectResult, func(t *testing.T, acted bool))
		points map[string]store.EffectState
		// readOnly: an observation lost in the crash is not committed,
		// and is never repeated by reconciliation.
		readOnly bool
	}
	points := map[string]store.EffectState{"after_intent": store.Aborted, "before_adapter": store.Failed, "after_adapter": store.Committed}
	acts := map[string]bool{"after_intent": false, "before_adapter": false, "after_adapter": true}
	for _, ac := range []adapterCase{
		{name: "artifact", setup: func(t *testing.T) (crashSpec, func(*env, int) *protocol.EffectResult, func(*testing.T, bool)) {
			dir := filepath.Join(t.TempDir(), "pub")
			_ = os.Mkdir(dir, 0o755)
			var name string
			mk := func(e *env, seq int) *protocol.EffectResult {
				name = fmt.Sprintf("a%d.bin", seq)
				p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": name}, []byte("artifact "+name))))
				mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
				req := byEffectReq(e, protocol.WorkerEvaluate, p)
				req.Approval = e.approve(p.ID)
				mustOK(t, e.do(req))
				return p
			}
			check := func(t *testing.T, acted bool) {
				got, err := os.ReadFile(filepath.Join(dir, name))
				if acted != (err == nil) || acted && string(got) != "artifact "+name {
					t.Fatalf("published=%v (%q), want %v", err == nil, got, acted)
				}
				ents, _ := os.ReadDir(dir)
				for _, en := range ents {
					if strings.HasPrefix(en.Name(), ".autonomic-recovery-") {
						t.Fatalf("recovery name left: %s", en.Name())
					}
				}
			}
			return crashSpec{ArtifactDir: dir}, mk, check
		}},
		{name: "git_commit", setup: func(t *testing.T) (crashSpec, func(*env, int) *protocol.EffectResult, func(*testing.T, bool)) {
			f := newGitFixture(t)
			var base, id string
			mk := func(e *env, seq int) *protocol.EffectResult {
				base = f.head()
				p := mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(func(d string) {
					_ = os.WriteFile(filepath.Join(d, fmt.Sprintf("lib/f%d.go", seq)), []byte("package lib\n"), 0o644)
				}))))
				mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
				id = p.ID
				return p
			}
			check := func(t *testing.T, acted bool) {
				n := strings.Count(sh(t, f.bare, "git", "log", "--format=%B", "refs/heads/main"), "Autonomic-Effect: "+id)
				if acted && (n != 1 || sh(t, f.bare, "git", "rev-parse", "refs/heads/main^") != base) || !acted && (n != 0 || f.head() != base) {
					t.Fatalf("acted=%v: %d commits with the trailer", acted, n)
				}
			}
			return crashSpec{GitRepo: f.bare}, mk, check
		}},
		{name: "http_mutation", setup: func(t *testing.T) (crashSpec, func(*env, int) *protocol.EffectResult, func(*testing.T, bool)) {
			srv := newMutationServer(t)
			var id string
			mk := func(e *env, seq int) *protocol.EffectResult {
				p := mustOK(t, e.do(prepareReq(e, "http_mutation", "api", map[string]string{"method": "POST", "path": "/items", "content_type": "application/json"}, []byte(`{"n":1}`))))
				mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
				id = p.ID
				return p
			}
			check := func(t *testing.T, acted bool) {
				if n := srv.count(id); acted && n != 1 || !acted && n != 0 {
					t.Fatalf("acted=%v: server saw %d requests", acted, n)
				}
			}
			return crashSpec{HTTPURL: srv.URL}, mk, check
		}},
		{name: "git_remote", setup: func(t *testing.T) (crashSpec, func(*env, int) *protocol.EffectResult, func(*testing.T, bool)) {
			f := newGitFixture(t)
			remote := filepath.Join(t.TempDir(), "pub.git")
			sh(t, "/", "git", "clone", "-q", "--bare", f.bare, remote)
			var expected, next string
			mk := func(e *env, seq int) *protocol.EffectResult {
				expected = sh(t, remote, "git", "rev-parse", "refs/heads/main")
				sh(t, f.work, "git", "reset", "-q", "--hard")
				_ = os.WriteFile(filepath.Join(f.work, "README"), []byte(fmt.Sprintf("v%d\n", seq)), 0o644)
				sh(t, f.work, "git", "commit", "-qam", "next")
				sh(t, f.work, "git", "push", "-qf", f.bare, "HEAD:refs/heads/main")
				next = f.head()
				p := mustOK(t, e.do(prepareReq(e, "git_remote", "pub", map[string]string{"ref": "refs/heads/main", "oid": next, "expected_remote_oid": expected}, nil)))
				mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
				return p
			}
			check := func(t *testing.T, acted bool) {
				got := sh(t, remote, "git", "rev-parse", "refs/heads/main")
				if acted && got != next || !acted && got != expected {
					t.Fatalf("acted=%v: remote at %s", acted, got)
				}
			}
			return crashSpec{GitRepo: f.bare, RemoteURL: remote}, mk, check
		}},
		{name: "http_read", readOnly: true, setup: func(t *testing.T) (crashSpec, func(*env, int) *protocol.EffectResult, func(*testing.T, bool)) {
			// The target counts the reads it served: the adapter reaches it
			// exactly when the crash point says it acted, and reconciliation
			// never reads again (nor hands the worker a response).
			var served atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/docs/api.json" {
					served.Add(1)
				}
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"ok":true}`)
			}))
			t.Cleanup(srv.Close)
			var before int64
			mk := func(e *env, seq int) *protocol.EffectResult {
				p := mustOK(t, e.do(prepareReq(e, "http_read", "docs", map[string]string{"method": "GET", "path": "/docs/api.json"}, nil)))
				mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
				before = served.Load()
				return p
			}
			check := func(t *testing.T, acted bool) {
				want := before
				if acted {
					want++
				}
				if got := served.Load(); got != want {
					t.Fatalf("acted=%v: the target served %d read(s) since prepare, want %d", acted, got-before, want-before)
				}
			}
			return crashSpec{ReadURL: srv.URL}, mk, check
		}},
	} {
		t.Run(ac.name, func(t *testing.T) {
			spec, mk, check := ac.setup(t)
			e := newEnv(t, func(e *env, cfg *Config) { cfg.Adapters = spec.adapters(e.payloads) })
			seq := 0
			// taker: committed as the kernel does, reconciled by a kernel
			// on another host, whose payload store never held the payload.
			for _, via := range []string{"kernel", "worker", "taker"} {
				for _, point := range []string{"after_intent", "before_adapter", "after_adapter"} {
					t.Run(via+"/"+point, func(t *testing.T) {
						seq++
						p := mk(e, seq)
						s := spec
						s.EffectID, s.Point, s.Worker = mustUUID(p.ID), point, via == "worker"
						e.runCrash(s)
						before, _ := e.store.Effect(ctxT(t), s.EffectID)
						if !before.State.Unsettled() {
							t.Fatalf("after the crash the effect is %s", before.State)
						}
						// The restarted kernel: a new broker admits nothing
						// before reconciliation.
						cfg := e.cfg
						if via == "taker" {
							empty, err := OpenPayloads(filepath.Join(t.TempDir(), "payloads"))
							if err != nil {
								t.Fatal(err)
							}
							cfg.Payloads = empty
						}
						b2, err := New(cfg)
						if err != nil {
							t.Fatal(err)
						}
						r := b2.Handle(ctxT(t), e.ep.ID, &protocol.WorkerRequest{Protocol: 1, RequestID: "x", Epoch: e.epoch(), Action: protocol.WorkerStatus, EffectID: p.ID})
						wantErr(t, r, protocol.CodeAuthorityUnavailable)
						st, err := b2.Reconcile(ctxT(t), uuid.Nil)
						if err != nil {
							t.Fatal(err)
						}
						want := points[point]
						if ac.readOnly && want == store.Committed {
							want = store.Failed
						}
						if len(st) != 1 || st[0].To != want {
							t.Fatalf("reconciled %+v, want %s", st, want)
						}
						check(t, acts[point])
						// A second reconciliation finds nothing to do and acts
						// on nothing.
						if st, err := b2.Reconcile(ctxT(t), uuid.Nil); err != nil || len(st) != 0 {
							t.Fatalf("second reconciliation: %+v %v", st, err)
						}
						check(t, acts[point])
					})
				}
			}
		})
	}
}
