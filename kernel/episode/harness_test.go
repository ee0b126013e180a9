package episode_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	rootfs "github.com/autonomic-kernel/autonomic/rootfs-builder"
	"github.com/autonomic-kernel/autonomic/seccomp"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/pgcluster"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// world is one launcher install (worker rootfs with the static effect
// client) and one PostgreSQL cluster, shared by the privileged tests.
type world struct {
	bed     *testbed.Bed
	cluster *pgcluster.Cluster
	tmp     string
	err     error
}

var shared world

const effectClient = "/usr/local/bin/autonomic-effect"

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		shared.err = setUp()
	}
	code := m.Run()
	if shared.cluster != nil {
		_ = shared.cluster.Stop(context.Background())
	}
	if shared.bed != nil {
		if code == 0 {
			_ = shared.bed.Close()
		} else {
			shared.bed.RemoveCgroups()
		}
	}
	if shared.tmp != "" && code == 0 {
		_ = os.RemoveAll(shared.tmp)
	}
	os.Exit(code)
}

func setUp() error {
	mod, err := testbed.ModuleRoot()
	if err != nil {
		return err
	}
	if shared.tmp, err = os.MkdirTemp("", "autonomic-episode-"); err != nil {
		return err
	}
	if err := os.Chmod(shared.tmp, 0o755); err != nil {
		return err
	}
	client := filepath.Join(shared.tmp, "autonomic-effect")
	build := exec.Command("go", "build", "-trimpath", "-o", client, "./broker/cmd/autonomic-effect")
	build.Dir = mod
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build autonomic-effect: %v\n%s", err, out)
	}
	if shared.bed, err = testbed.New(context.Background(), testbed.Options{Spec: "rootfs-builder/specs/worker.json",
		Add: []rootfs.Add{{Src: client, Dest: effectClient}}}); err != nil {
		return err
	}
	db := filepath.Join(shared.tmp, "pg")
	if err := os.Mkdir(db, 0o755); err != nil {
		return err
	}
	shared.cluster, err = storetest.StartCluster(db)
	return err
}

// rig is one test's kernel: its own database, broker and controller.
type rig struct {
	st       *store.Postgres
	b        *broker.Broker
	k        *episode.Kernel
	repo     string // the authoritative bare repository
	base     string // its base OID
	payloads *broker.Payloads
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=fixture", "GIT_AUTHOR_EMAIL=f@example.invalid", "GIT_COMMITTER_NAME=fixture",
		"GIT_COMMITTER_EMAIL=f@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// fixture is a small repository with a failing test: calc.sh adds one too
// many, test.sh expects 2.
func fixture(t *testing.T) (bare, base string) {
	t.Helper()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	git(t, work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "calc.sh"), []byte("echo $((1+1+1))\n"), 0o644)
	os.WriteFile(filepath.Join(work, "test.sh"), []byte("[ \"$(sh calc.sh)\" = 2 ] && echo PASS || { echo FAIL; exit 1; }\n"), 0o644)
	git(t, work, "add", ".")
	git(t, work, "commit", "-q", "-m", "calc with a failing test")
	bare = filepath.Join(dir, "authoritative.git")
	git(t, dir, "clone", "-q", "--bare", work, bare)
	return bare, git(t, bare, "rev-parse", "refs/heads/main")
}

func newRig(t *testing.T, ctx context.Context, name string, opts ...func(*episode.Config)) *rig {
	t.Helper()
	privileged.Require(t)
	if shared.err != nil {
		t.Fatalf("world: %v", shared.err)
	}
	// A fresh database per run, so -count=N repeats the same test.
	name += "_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if err := shared.cluster.CreateDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, store.Config{URL: shared.cluster.KernelConnString(name), AdminURL: shared.cluster.AdminConnString(name),
		InstanceID: "episode-test-" + name, OwnerTTL: 30 * time.Second, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	r := &rig{st: st}
	r.repo, r.base = fixture(t)
	if r.payloads, err = broker.OpenPayloads(filepath.Join(t.TempDir(), "payloads")); err != nil {
		t.Fatal(err)
	}
	obs := &episode.Observer{}
	gitc := &broker.GitCommit{Targets: map[string]broker.GitTarget{"repo": {Repo: r.repo, AllowedRefs: []string{"refs/heads/main"},
		AllowedPaths: []string{"calc.sh"}, AuthorName: "autonomic", AuthorEmail: "kernel@example.invalid"}}}
	if r.b, err = broker.New(broker.Config{Store: st, Payloads: r.payloads, Adapters: []broker.Adapter{obs.Wrap(gitc)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.b.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	p, err := seccomp.Shipped("worker")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := seccomp.Compile(p, seccomp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(testbed.CgroupV2Mount(), shared.bed.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	cfg := episode.Config{Store: st, Broker: r.b, Domains: shared.bed.Domains(), WorkspacesRoot: shared.bed.Workspaces,
		SocketsRoot: shared.bed.Sockets, CgroupParent: "/" + rel, OwnerUID: shared.bed.OwnerUID, OwnerGID: shared.bed.OwnerGID,
		Seccomp: prog.Bytes(), Observer: obs, AuthorityInterval: 200 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	if r.k, err = episode.New(cfg); err != nil {
		t.Fatal(err)
	}
	return r
}

// worker fixes calc.sh in /workspace (or finds it fixed in a restored
// overlay), proves the test passes, proposes the
// exact diff as a git_commit and commits it. With PROBE=violate it opens an
// AF_INET socket after preparing, in epoch 1 only, and then waits.
const worker = `
set -u
E=` + effectClient + `
G="git -c safe.directory=* -c core.hooksPath=/dev/null"
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
cd /workspace
# A restored generation may find its fix already in the overlay (the
# initial checkpoint is taken while the worker runs): it goes on from there.
if sh test.sh >/dev/null; then echo "FOUND-FIX"; else sed -i 's/1+1+1/1+1/' calc.sh && echo "FIXED"; fi
sh test.sh || { echo "TEST-STILL-FAILS"; exit 1; }
$G diff --binary > /tmp/fix.patch || { echo DIFF-FAILED; exit 1; }
base=$($G rev-parse HEAD)
p=$($E prepare -kind git_commit -target-id repo -target "{\"base_oid\":\"$base\",\"ref\":\"refs/heads/main\",\"message\":\"fix calc\"}" -payload /tmp/fix.patch) || { echo "PREPARE-FAILED $p"; exit 1; }
id=$(pick "$p" id); rev=$(pick "$p" revision)
echo "EPOCH=$AUTONOMIC_EPOCH EFFECT=$id"
if [ "${PROBE:-}" = violate ] && [ "$AUTONOMIC_EPOCH" = 1 ]; then
  ` + testbed.ProbePath + ` socket-inet
  sleep 120
fi
$E evaluate -effect "$id" -revision "$rev" >/dev/null || { echo EVALUATE-FAILED; exit 1; }
c=$($E commit -effect "$id" -revision "$rev") || { echo "COMMIT-FAILED $c"; exit 1; }
echo "STATE=$(pick "$c" state)"
`

func (r *rig) spec(env map[string]string) episode.Spec {
	grant := authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}},
		Allow: []string{"**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
	return episode.Spec{
		OriginIntent: "Fix the failing test in test.sh without changing the test.",
		Repo:         r.repo, BaseOID: r.base, Policy: grant, Envelope: grant,
		Repair: &authority.Spec{MaxClass: 3, Grants: grant.Grants, Allow: []string{"**"}, Forbid: []string{"test.sh"}, Budget: grant.Budget},
		Argv:   []string{"/bin/bash", "-c", worker}, Env: env, MaxRepairs: 1, LeaseTTL: time.Hour,
	}
}

// nextExit waits for a worker exit of the episode.
func nextExit(t *testing.T, ctx context.Context, e *episode.Episode) episode.WorkerExit {
	t.Helper()
	select {
	case x := <-e.WorkerExits():
		return x
	case <-e.Done():
		t.Fatalf("supervisor stopped: %v (%+v)", e.Exit(), e.Status())
	case <-ctx.Done():
		t.Fatalf("no worker exit: %+v", e.Status())
	}
	return episode.WorkerExit{}
}

// trailerCommit returns the authoritative main's commit message.
func headMessage(t *testing.T, repo string) string {
	return git(t, repo, "log", "-1", "--format=%B", "refs/heads/main")
}
