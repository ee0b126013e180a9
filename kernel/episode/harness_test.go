package episode_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
	"github.com/autonomic-kernel/autonomic/kernel/verify"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/protocol"
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
	if c := os.Getenv(crashChildEnv); c != "" {
		// A kernel process TestKernelKilledAtRandomPoints runs and kills:
		// it uses its parent's world, and never cleans it up.
		shared.err = crashChildWorld(c)
		os.Exit(m.Run())
	}
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// Fuzzing (FuzzParseOutcome) needs no world, and every fuzz
		// worker would build its own.
		os.Exit(m.Run())
	}
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
	// autonomic-entry too: agent-like workers bridge their relay and
	// egress sockets to loopback (services_test.go).
	entry := filepath.Join(shared.tmp, "autonomic-entry")
	build = exec.Command("go", "build", "-trimpath", "-o", entry, "./entry/cmd/autonomic-entry")
	build.Dir = mod
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build autonomic-entry: %v\n%s", err, out)
	}
	if shared.bed, err = testbed.New(context.Background(), testbed.Options{Spec: "rootfs-builder/specs/worker.json",
		Add: []rootfs.Add{{Src: client, Dest: effectClient}, {Src: entry, Dest: entryPath}}}); err != nil {
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
	db       string
	url      string // the kernel's and the admin's connection strings
	adminURL string
	opts     rigOptions
	st       *store.Postgres
	b        *broker.Broker
	k        *episode.Controller
	gov      *governor.Governor
	dom      *crashable
	repo     string // the authoritative bare repository
	base     string // its base OID
	payloads *broker.Payloads
	// payloadsDir is where payloads lives (a crashed kernel process
	// opens it too).
	payloadsDir string
}

// rigOptions vary a rig: verifyArgv turns automatic verification on.
type rigOptions struct {
	verifyArgv []string
	config     []func(*episode.Config)
	governor   []func(*governor.Config)     // applied before the governor (and the broker) exist
	regulator  *regulator.Live              // the kernel's live regulator, handed to governor and controller
	hooks      *broker.Hooks                // the broker's fault-injection points, every boot
	files      map[string]string            // more files in the fixture's base commit
	paths      []string                     // the git_commit target's allowed paths (default calc.sh)
	reference  bool                         // the reference repository (gates/scenario/fixture/repo) instead of fixture
	binary     bool                         // the git_commit target allows binary patches
	broker     []func(*rig, *broker.Config) // more broker configuration (adapters, keys), the governor made
}

type rigOpt func(*rigOptions)

func withConfig(f func(*episode.Config)) rigOpt {
	return func(o *rigOptions) { o.config = append(o.config, f) }
}

func withGovernor(f func(*governor.Config)) rigOpt {
	return func(o *rigOptions) { o.governor = append(o.governor, f) }
}

func withRegulator(l *regulator.Live) rigOpt {
	return func(o *rigOptions) { o.regulator = l }
}

func withBrokerHooks(h *broker.Hooks) rigOpt {
	return func(o *rigOptions) { o.hooks = h }
}

// withFiles adds files to the fixture's base commit.
func withFiles(files map[string]string) rigOpt {
	return func(o *rigOptions) { o.files = files }
}

// withTargetPaths sets the git_commit target's allowed paths.
func withTargetPaths(globs ...string) rigOpt {
	return func(o *rigOptions) { o.paths = globs }
}

// withBinaryTarget: the git_commit target allows binary patches, and
// the controller's harvest admits them for it, as serve composes both from
// one allow_binary.
func withBinaryTarget() rigOpt {
	return func(o *rigOptions) {
		o.binary = true
		o.config = append(o.config, func(c *episode.Config) {
			c.HarvestAdmit = func(id string) workspace.Admit { return workspace.Admit{Binary: id == "repo"} }
		})
	}
}

// withBroker adds to the broker's configuration once the rig's governor
// exists (an adapter is reported through r.gov.Wrap).
func withBroker(f func(r *rig, bc *broker.Config)) rigOpt {
	return func(o *rigOptions) { o.broker = append(o.broker, f) }
}

func withVerification(argv ...string) rigOpt {
	return func(o *rigOptions) { o.verifyArgv = argv }
}

// crashable is the launcher as one kernel process sees it: after crash,
// that kernel can no longer reach it (its process is gone), while the
// domains it launched live on.
type crashable struct {
	domain.ExecutionDomain
	dead atomic.Bool
	// releaseDelay (nanoseconds) slows every release down, and released
	// counts those done: TestDrainLetsEndedEpisodesGo widens the window
	// between an episode's recorded end and its archives going.
	releaseDelay, released atomic.Int64

	mu      sync.Mutex
	running map[string]*domain.Running // by launcher id, as created
}

// created returns the domains this kernel created whose id has prefix.
func (c *crashable) created(prefix string) map[string]*domain.Running {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]*domain.Running{}
	for id, r := range c.running {
		if strings.HasPrefix(id, prefix) {
			out[id] = r
		}
	}
	return out
}

var errKernelGone = errors.New("test: this kernel has crashed")

func (c *crashable) Create(ctx context.Context, s domain.Spec) (*domain.Running, error) {
	if c.dead.Load() {
		return nil, errKernelGone
	}
	r, err := c.ExecutionDomain.Create(ctx, s)
	if err == nil {
		c.mu.Lock()
		if c.running == nil {
			c.running = map[string]*domain.Running{}
		}
		c.running[s.ID] = r
		c.mu.Unlock()
	}
	return r, err
}

func (c *crashable) Destroy(ctx context.Context, id string) (*protocol.DomainState, error) {
	if c.dead.Load() {
		return nil, errKernelGone
	}
	return c.ExecutionDomain.Destroy(ctx, id)
}

// Release passes the launcher's release through, so an episode that ends
// under the harness gives its checkpoints back as it would in production.
func (c *crashable) Release(ctx context.Context, id, digest string) (*protocol.CheckpointResult, error) {
	if c.dead.Load() {
		return nil, errKernelGone
	}
	time.Sleep(time.Duration(c.releaseDelay.Load()))
	defer c.released.Add(1)
	return c.ExecutionDomain.(*domain.Linux).Release(ctx, id, digest)
}

func (c *crashable) Checkpoint(ctx context.Context, id string) (*protocol.CheckpointResult, error) {
	if c.dead.Load() {
		return nil, errKernelGone
	}
	return c.ExecutionDomain.Checkpoint(ctx, id)
}

// fixture is a small repository with a failing test: calc.sh adds one too
// many, test.sh expects 2.
func fixture(t *testing.T, more map[string]string) (bare, base string) {
	t.Helper()
	files := map[string]string{
		"calc.sh": "echo $((1+1+1))\n",
		"test.sh": "[ \"$(sh calc.sh)\" = 2 ] && echo PASS || { echo FAIL; exit 1; }\n",
	}
	for name, content := range more {
		files[name] = content
	}
	return testbed.BareRepo(t, t.TempDir(), "authoritative.git", files, "calc with a failing test")
}

func newRig(t *testing.T, ctx context.Context, name string, opts ...rigOpt) *rig {
	t.Helper()
	privileged.Require(t)
	if shared.err != nil {
		t.Fatalf("world: %v", shared.err)
	}
	r := &rig{}
	for _, o := range opts {
		o(&r.opts)
	}
	// A fresh database per run, so -count=N repeats the same test.
	r.db = name + "_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if err := shared.cluster.CreateDatabase(ctx, r.db); err != nil {
		t.Fatal(err)
	}
	r.url, r.adminURL = shared.cluster.KernelConnString(r.db), shared.cluster.AdminConnString(r.db)
	if r.opts.reference {
		r.repo, r.base = referenceRepo(t, r.opts.files)
	} else {
		r.repo, r.base = fixture(t, r.opts.files)
	}
	var err error
	r.payloadsDir = filepath.Join(t.TempDir(), "payloads")
	if r.payloads, err = broker.OpenPayloads(r.payloadsDir); err != nil {
		t.Fatal(err)
	}
	r.boot(t, ctx)
	if _, err := r.b.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// boot starts a kernel process's worth of parts on the rig's database:
// store, broker, launcher view and controller. The instance id is the
// same across boots, as a restarted kernel on one host has.
func (r *rig) boot(t *testing.T, ctx context.Context) {
	t.Helper()
	st, err := store.Open(ctx, store.Config{URL: r.url, AdminURL: r.adminURL,
		InstanceID: "episode-test-" + r.db, OwnerTTL: 30 * time.Second, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	r.st = st
	r.dom = &crashable{ExecutionDomain: shared.bed.Domains()}
	p, err := seccomp.Shipped("worker")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := seccomp.Compile(p, seccomp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	paths := r.opts.paths
	if paths == nil {
		paths = []string{"calc.sh"}
	}
	gitc := &broker.GitCommit{Targets: map[string]broker.GitTarget{"repo": {Repo: r.repo, AllowedRefs: []string{"refs/heads/main"},
		AllowedRefPrefixes: []string{"refs/heads/agent/"},
		AllowedPaths:       paths, AuthorName: "autonomic", AuthorEmail: "kernel@example.invalid", AllowBinary: r.opts.binary}}}
	// One direction, as serve composes: regulator → governor → broker →
	// controller.
	gc := governor.Config{Store: st, Regulator: r.opts.regulator}
	if r.opts.verifyArgv != nil {
		gc.Verification = &verify.Runner{Domains: r.dom, WorkspacesRoot: shared.bed.Workspaces, OwnerUID: shared.bed.OwnerUID,
			OwnerGID: shared.bed.OwnerGID, Seccomp: prog.Bytes(), Targets: map[string]verify.Target{"repo": {Repo: r.repo,
				Argv: r.opts.verifyArgv, Timeout: 30 * time.Second}}, Logger: hclog.New(&hclog.LoggerOptions{Name: "verify", Output: os.Stderr})}
	}
	for _, o := range r.opts.governor {
		o(&gc)
	}
	if r.gov, err = governor.New(gc); err != nil {
		t.Fatal(err)
	}
	bc := broker.Config{Store: st, Payloads: r.payloads, Adapters: []broker.Adapter{r.gov.Wrap(gitc)},
		Trajectory: r.gov.Trajectory, RegimeMaxClass: governor.RegimeMaxClass(), LeaseCheck: r.gov.CheckLease, Hooks: r.opts.hooks}
	// As serve composes: the slow loop, verification or not, and the
	// controller parking an episode whose Action waits.
	bc.Verifier = r.gov.Evaluate
	bc.AwaitingHuman = func(e store.Effect) {
		if r.k != nil {
			r.k.Park(e)
		}
	}
	for _, o := range r.opts.broker {
		o(r, &bc)
	}
	if r.b, err = broker.New(bc); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(testbed.CgroupV2Mount(), shared.bed.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	cfg := episode.Config{Store: st, Broker: r.b, Domains: r.dom, WorkspacesRoot: shared.bed.Workspaces,
		SocketsRoot: shared.bed.Sockets, CgroupParent: "/" + rel, OwnerUID: shared.bed.OwnerUID, OwnerGID: shared.bed.OwnerGID,
		Seccomp: prog.Bytes(), Governor: r.gov, Regulator: r.opts.regulator, AuthorityInterval: 200 * time.Millisecond,
		PolicyKeys: policy.Keys{policyKeyID: policyKey().Public().(ed25519.PublicKey)}}
	for _, o := range r.opts.config {
		o(&cfg)
	}
	if r.k, err = episode.New(cfg); err != nil {
		t.Fatal(err)
	}
}

// worker fixes calc.sh in /workspace (or finds it fixed in a restored
// overlay), proves the test passes, proposes the
// exact diff as a git_commit and commits it. With PROBE=violate it opens an
// AF_INET socket after preparing, in epoch 1 only, and then waits; with
// PROBE=storm it tries fifty from one process, microseconds apart.
const worker = `
set -u
E=` + effectClient + `
G="git -c safe.directory=* -c core.hooksPath=/dev/null"
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
cd /workspace
# A restored generation may find its fix already in the overlay (the
# initial checkpoint is taken while the worker runs): it goes on from there.
if [ "${PROBE:-}" = break ]; then
  # A patch that breaks the test, proposed without running it: only
  # verification stands between it and the authoritative repository.
  sed -i 's/1+1+1/1+2+1/' calc.sh && echo "BROKE"
else
  if sh test.sh >/dev/null; then echo "FOUND-FIX"; else sed -i 's/1+1+1/1+1/' calc.sh && echo "FIXED"; fi
  sh test.sh || { echo "TEST-STILL-FAILS"; exit 1; }
fi
if [ "${PROBE:-}" = violate-touch ] && [ "$AUTONOMIC_EPOCH" = 2 ]; then
  # The repaired generation also edits the test, which its narrowed
  # lease forbids (the first lease allowed it).
  echo "# touched after the repair" >> test.sh
fi
$G diff --binary > /tmp/fix.patch || { echo DIFF-FAILED; exit 1; }
base=$($G rev-parse HEAD)
p=$($E prepare -kind git_commit -target-id repo -target "{\"base_oid\":\"$base\",\"ref\":\"refs/heads/main\",\"message\":\"fix calc\"}" -payload /tmp/fix.patch) || { echo "PREPARE-FAILED $p"; exit 1; }
id=$(pick "$p" id); rev=$(pick "$p" revision)
echo "EPOCH=$AUTONOMIC_EPOCH EFFECT=$id"
probe=${PROBE:-}
if [ "${probe%-touch}" = violate ] && [ "$AUTONOMIC_EPOCH" = 1 ]; then
  ` + testbed.ProbePath + ` socket-inet
  sleep 120
fi
if [ "${PROBE:-}" = storm ] && [ "$AUTONOMIC_EPOCH" = 1 ]; then
  for i in $(seq 50); do { : 3<>/dev/tcp/127.0.0.1/9; } 2>/dev/null; done
  sleep 120
fi
if [ "${PROBE:-}" = connect ] && [ "$AUTONOMIC_EPOCH" = 1 ]; then
  ` + testbed.ProbePath + ` connect-tcp 1.1.1.1:443
  sleep 120
fi
if [ "${PROBE:-}" = hold ] && [ "$AUTONOMIC_EPOCH" = 1 ]; then
  echo HOLDING; sleep 120
fi
$E evaluate -effect "$id" -revision "$rev" >/dev/null || { echo EVALUATE-FAILED; exit 1; }
c=$($E commit -effect "$id" -revision "$rev") || { echo "COMMIT-FAILED $c"; exit 1; }
echo "STATE=$(pick "$c" state)"
`

// grantSpec is the rig's policy and envelope: git_commit to repo up to
// class 3, anywhere.
func grantSpec() authority.Spec {
	return authority.Spec{MaxClass: 3, Grants: []authority.Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}},
		Allow: []string{"**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
}

func (r *rig) spec(env map[string]string) episode.Spec {
	grant := grantSpec()
	return episode.Spec{
		OriginIntent: "Fix the failing test in test.sh without changing the test.",
		Repo:         r.repo, BaseOID: r.base, Policy: signPolicy(grant), Envelope: grant,
		Repair: &authority.Spec{MaxClass: 3, Grants: grant.Grants, Allow: []string{"**"}, Forbid: []string{"test.sh"}, Budget: grant.Budget},
		Argv:   []string{"/bin/bash", "-c", worker}, Env: env, MaxRepairs: 1, LeaseTTL: time.Hour,
	}
}

// policyKeyID names the rig's policy signing key in its PolicyKeys.
const policyKeyID = "test-policy"

// policyKey is the rig's policy signing key: fixed, so a rebooted rig
// still verifies the policies its episodes were started with.
func policyKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
}

// signPolicy signs c as policy "fixture" version 1 with the rig's key.
func signPolicy(c authority.Spec) json.RawMessage {
	signed, err := policy.Sign(policyKey(), policyKeyID, policy.Document{Schema: policy.Schema, ID: "fixture", Version: 1,
		Capability: c, Semantic: policy.Semantic{MaxRisk: 0.5}})
	if err != nil {
		panic(err)
	}
	return signed
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

// end ends e as to, then checks its ledger verifies.
func (r *rig) end(t *testing.T, ctx context.Context, e *episode.Episode, to episode.State, why string) {
	t.Helper()
	if err := e.End(ctx, to, why); err != nil {
		t.Fatal(err)
	}
	if rep, err := r.st.VerifyLedger(ctx, e.ID()); err != nil {
		t.Fatalf("ledger: %+v, %v", rep, err)
	}
}

// trailerCommit returns the authoritative main's commit message.
func headMessage(t *testing.T, repo string) string {
	return testbed.Git(t, repo, "log", "-1", "--format=%B", "refs/heads/main")
}

// landedFix checks a worker that fixed calc.sh and committed it: its exit
// and output, and the authoritative head — the trailer, the fixed file, the
// exact base — and returns the committed effect the trailer names.
func landedFix(t *testing.T, ctx context.Context, st store.Store, repo, base string, e *episode.Episode, x episode.WorkerExit) store.Effect {
	t.Helper()
	out := string(x.Output)
	t.Logf("worker:\n%s", out)
	if x.Exited.ExitCode == nil || *x.Exited.ExitCode != 0 || !strings.Contains(out, "FIXED") || !strings.Contains(out, "STATE=committed") {
		t.Fatalf("worker did not commit: %+v\n%s", x.Exited, out)
	}
	msg := headMessage(t, repo)
	if !strings.Contains(msg, broker.TrailerKey+":") || !strings.Contains(msg, "fix calc") {
		t.Fatalf("authoritative head message lacks the trailer:\n%s", msg)
	}
	if got := testbed.Git(t, repo, "show", "refs/heads/main:calc.sh"); got != "echo $((1+1))" {
		t.Fatalf("authoritative calc.sh = %q", got)
	}
	if testbed.Git(t, repo, "rev-parse", "refs/heads/main^") != base {
		t.Fatal("the commit is not on the exact base")
	}
	id := strings.TrimSpace(msg[strings.Index(msg, broker.TrailerKey+":")+len(broker.TrailerKey)+1:])
	eff, err := st.Effect(ctx, uuid.MustParse(id))
	if err != nil || eff.State != store.Committed || eff.EpisodeID != e.ID() {
		t.Fatalf("the trailer's effect: %+v, %v", eff, err)
	}
	return eff
}
