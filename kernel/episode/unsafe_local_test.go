package episode_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// unsafeWorker is the lifecycle's worker for a plain host process: it
// finds its workspace and broker socket in the environment UnsafeLocal
// gives it instead of at /workspace and /run/autonomic/effect.sock. With
// PROBE=hold it stops after prepare and waits.
const unsafeWorker = `
set -u
E="$EFFECT"
S="$AUTONOMIC_BROKER_SOCKET"
G="git -c safe.directory=* -c core.hooksPath=/dev/null"
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
cd "$AUTONOMIC_WORKSPACE"
sed -i 's/1+1+1/1+1/' calc.sh && echo "FIXED"
sh test.sh || { echo "TEST-STILL-FAILS"; exit 1; }
patch=$(mktemp)
$G diff --binary > "$patch" || { echo DIFF-FAILED; exit 1; }
base=$($G rev-parse HEAD)
p=$($E prepare -socket "$S" -kind git_commit -target-id repo -target "{\"base_oid\":\"$base\",\"ref\":\"refs/heads/main\",\"message\":\"fix calc\"}" -payload "$patch") || { echo "PREPARE-FAILED $p"; exit 1; }
rm -f "$patch"
id=$(pick "$p" id); rev=$(pick "$p" revision)
echo "EPOCH=$AUTONOMIC_EPOCH EFFECT=$id"
if [ "${PROBE:-}" = hold ]; then
  echo HOLDING; sleep 120
fi
$E evaluate -socket "$S" -effect "$id" -revision "$rev" >/dev/null || { echo EVALUATE-FAILED; exit 1; }
c=$($E commit -socket "$S" -effect "$id" -revision "$rev") || { echo "COMMIT-FAILED $c"; exit 1; }
echo "STATE=$(pick "$c" state)"
`

// noCheckpoints is UnsafeLocal with every Checkpoint call counted: a
// controller that tries one has not read the backend's features.
type noCheckpoints struct {
	*domain.UnsafeLocal
	tried atomic.Int32
}

func (d *noCheckpoints) Checkpoint(ctx context.Context, id string) (*protocol.CheckpointResult, error) {
	d.tried.Add(1)
	return d.UnsafeLocal.Checkpoint(ctx, id)
}

// unsafeRig is one test's kernel on the UnsafeLocal backend. It needs no
// root: as root it shares the package's cluster, otherwise it starts its
// own as the caller.
type unsafeRig struct {
	st   *store.Postgres
	k    *episode.Controller
	dom  *noCheckpoints
	repo string
	base string
	env  map[string]string
}

func newUnsafeRig(t *testing.T, ctx context.Context, name string) *unsafeRig {
	t.Helper()
	cluster := shared.cluster
	if cluster == nil {
		if shared.err != nil {
			t.Fatalf("world: %v", shared.err)
		}
		cluster = storetest.Start(t)
	}
	db := name + "_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if err := cluster.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	r := &unsafeRig{env: map[string]string{"EFFECT": unsafeEffectClient(t)}}
	r.repo, r.base = fixture(t, nil)
	st, err := store.Open(ctx, store.Config{URL: cluster.KernelConnString(db), AdminURL: cluster.AdminConnString(db),
		InstanceID: "episode-unsafe-" + db, OwnerTTL: 30 * time.Second, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	r.st = st
	payloads, err := broker.OpenPayloads(filepath.Join(t.TempDir(), "payloads"))
	if err != nil {
		t.Fatal(err)
	}
	gov, err := governor.New(governor.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	gitc := &broker.GitCommit{Targets: map[string]broker.GitTarget{"repo": {Repo: r.repo, AllowedRefs: []string{"refs/heads/main"},
		AllowedPaths: []string{"calc.sh"}, AuthorName: "autonomic", AuthorEmail: "kernel@example.invalid"}}}
	b, err := broker.New(broker.Config{Store: st, Payloads: payloads, Adapters: []broker.Adapter{gov.Wrap(gitc)},
		Trajectory: gov.Trajectory, RegimeMaxClass: governor.RegimeMaxClass(), LeaseCheck: gov.CheckLease, Verifier: gov.Evaluate})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	workspaces := filepath.Join(t.TempDir(), "workspaces")
	if err := os.Mkdir(workspaces, 0o755); err != nil {
		t.Fatal(err)
	}
	// A short private directory: socket paths are limited to 108 bytes.
	sockets, err := os.MkdirTemp("", "ul-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockets) })
	log := hclog.New(&hclog.LoggerOptions{Name: "unsafe-episode", Output: os.Stderr, Level: hclog.Warn})
	r.dom = &noCheckpoints{UnsafeLocal: &domain.UnsafeLocal{WorkspacesRoot: workspaces, SocketsRoot: sockets, Log: log.Named("UNSAFE_LOCAL")}}
	// No CgroupParent and no seccomp program: an unisolated backend uses
	// neither.
	if r.k, err = episode.New(episode.Config{Store: st, Broker: b, Domains: r.dom, WorkspacesRoot: workspaces, SocketsRoot: sockets,
		OwnerUID: os.Getuid(), OwnerGID: os.Getgid(), Governor: gov, AuthorityInterval: 200 * time.Millisecond, Logger: log,
		PolicyKeys: policy.Keys{policyKeyID: policyKey().Public().(ed25519.PublicKey)}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// unsafeEffectClient is the effect client on the host: the one the
// privileged world built, or a fresh build.
func unsafeEffectClient(t *testing.T) string {
	t.Helper()
	if shared.tmp != "" {
		if p := filepath.Join(shared.tmp, "autonomic-effect"); fileExists(p) {
			return p
		}
	}
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "autonomic-effect")
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", p, "./broker/cmd/autonomic-effect")
	build.Dir = mod
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build autonomic-effect: %v\n%s", err, out)
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (r *unsafeRig) spec(env map[string]string) episode.Spec {
	s := (&rig{repo: r.repo, base: r.base}).spec(nil)
	s.Argv = []string{"/bin/bash", "-c", unsafeWorker}
	s.Env = map[string]string{}
	for k, v := range r.env {
		s.Env[k] = v
	}
	for k, v := range env {
		s.Env[k] = v
	}
	return s
}

// events returns the episode's ledger entries of kind.
func eventsOf(t *testing.T, ctx context.Context, st store.Store, ep uuid.UUID, kind string) []map[string]any {
	t.Helper()
	evs, err := st.Events(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, ev := range evs {
		if ev.Kind != kind {
			continue
		}
		var b map[string]any
		if err := json.Unmarshal(ev.Body, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestUnsafeLocalLifecycle: on the unisolated development backend the
// whole lifecycle runs — the worker, a plain host process in the prepared
// workspace, fixes the failing test, proposes the exact diff through the
// broker socket, evaluate makes it ready and the commit lands on the
// authoritative repository with its trailer — without a single checkpoint,
// and the ledger says unsafe_local on the domain it ran in.
func TestUnsafeLocalLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newUnsafeRig(t, ctx, "episode_unsafe_lifecycle")
	e, err := r.k.Start(ctx, r.spec(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := e.Status()
	if s.State != episode.Running || s.Epoch != 1 || s.Generation != 1 || !s.UnsafeLocal {
		t.Fatalf("after start: %+v", s)
	}
	landedFix(t, ctx, r.st, r.repo, r.base, e, nextExit(t, ctx, e))
	// A post-commit checkpoint would follow the commit asynchronously;
	// give it the time it would take before ending.
	time.Sleep(500 * time.Millisecond)
	launcherID := e.Status().LauncherID
	if err := e.End(ctx, episode.Completed, "worker committed the fix"); err != nil {
		t.Fatal(err)
	}
	if st, err := r.dom.Inspect(ctx, launcherID); err != nil || st.Exists {
		t.Fatalf("domain after completion: %+v, %v", st, err)
	}
	if n := r.dom.tried.Load(); n != 0 {
		t.Errorf("the controller asked UnsafeLocal for %d checkpoints", n)
	}
	if ck := eventsOf(t, ctx, r.st, e.ID(), "checkpoint_recorded"); len(ck) != 0 {
		t.Errorf("checkpoints recorded on unsafe_local: %v", ck)
	}
	if _, err := r.st.LatestStableCheckpoint(ctx, e.ID()); err == nil {
		t.Error("a stable checkpoint exists on unsafe_local")
	}
	doms := eventsOf(t, ctx, r.st, e.ID(), "domain_created")
	if len(doms) != 1 || doms[0]["unsafe_local"] != true {
		t.Fatalf("domain_created events %v, want one labelled unsafe_local", doms)
	}
	rec, err := r.st.Episode(ctx, e.ID())
	if err != nil || rec.State != store.EpisodeCompleted || rec.CurrentCheckpoint != nil {
		t.Fatalf("episode record: %+v, %v", rec, err)
	}
	if rep, err := r.st.VerifyLedger(ctx, e.ID()); err != nil {
		t.Fatalf("ledger: %+v, %v", rep, err)
	}
}

// TestUnsafeLocalContainsInsteadOfRepairing: a containment on a backend
// without checkpoints never pretends to repair: no epoch advance, no new
// generation, the domain is gone, the prepared effect can no longer commit
// and the episode ends contained saying why.
func TestUnsafeLocalContainsInsteadOfRepairing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newUnsafeRig(t, ctx, "episode_unsafe_contain")
	e, err := r.k.Start(ctx, r.spec(map[string]string{"PROBE": "hold"}))
	if err != nil {
		t.Fatal(err)
	}
	launcherID := e.Status().LauncherID
	// Wait until the worker holds a prepared effect.
	var effect uuid.UUID
	for effect == uuid.Nil {
		effs, err := r.st.ListEffects(ctx, e.ID(), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(effs) > 0 {
			effect = effs[0].ID
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the worker prepared nothing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.Contain("test: homeostat containment")
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatalf("not contained: %+v", e.Status())
	}
	s := e.Status()
	if s.State != episode.Contained || !strings.Contains(s.Why, "no checkpoint exists on the unsafe_local backend") ||
		!strings.Contains(s.Why, "test: homeostat containment") || s.Repairs != 0 || s.Generation != 1 || s.Epoch != 1 {
		t.Fatalf("after containment: %+v", s)
	}
	if st, err := r.dom.Inspect(ctx, launcherID); err != nil || st.Exists {
		t.Fatalf("domain after containment: %+v, %v", st, err)
	}
	if lin, err := r.st.Lineage(ctx, e.ID()); err != nil || len(lin) != 0 {
		t.Fatalf("lineage %+v, %v: a containment without repair advances no epoch", lin, err)
	}
	if gs := eventsOf(t, ctx, r.st, e.ID(), "generation_started"); len(gs) != 0 {
		t.Fatalf("a new generation started: %v", gs)
	}
	if n := r.dom.tried.Load(); n != 0 {
		t.Errorf("the controller asked UnsafeLocal for %d checkpoints", n)
	}
	rec, err := r.st.Episode(ctx, e.ID())
	if err != nil || rec.State != store.EpisodeContained {
		t.Fatalf("episode record: %+v, %v", rec.State, err)
	}
	ended := eventsOf(t, ctx, r.st, e.ID(), "episode_ended")
	if len(ended) != 1 || !strings.Contains(ended[0]["reason"].(string), "no checkpoint exists on the unsafe_local backend") {
		t.Fatalf("episode_ended events %v", ended)
	}
	if eff, err := r.st.Effect(ctx, effect); err != nil || eff.State == store.Committed {
		t.Fatalf("the held effect: %+v, %v", eff.State, err)
	}
	if got := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); got != r.base {
		t.Fatalf("main moved to %s after containment", got)
	}
	if rep, err := r.st.VerifyLedger(ctx, e.ID()); err != nil {
		t.Fatalf("ledger: %+v, %v", rep, err)
	}
}
