package episode_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// gate stops the first caller that reaches its armed point, as a kernel
// process killed there would stop: the test crashes the kernel while the
// caller waits, then releases it into a world where that kernel is gone.
type gate struct {
	mu      sync.Mutex
	point   string
	reached chan struct{}
	release chan struct{}
}

func (g *gate) arm(point string) (reached, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.point, g.reached, g.release = point, make(chan struct{}), make(chan struct{})
	return g.reached, g.release
}

// hit blocks the caller at point when it is armed and reports whether it
// did; it returns after the crash.
func (g *gate) hit(point string) bool {
	g.mu.Lock()
	if g.point != point {
		g.mu.Unlock()
		return false
	}
	g.point = ""
	reached, release := g.reached, g.release
	g.mu.Unlock()
	close(reached)
	<-release
	return true
}

// hooks are the broker's commit points: a commit stopped at one never goes
// on (the goroutine ends, as it would with its process).
func (g *gate) hooks() *broker.Hooks {
	stop := func(point string) {
		if g.hit(point) {
			runtime.Goexit()
		}
	}
	return &broker.Hooks{
		AfterIntent:   func(store.Effect) { stop("commit_intent") },
		BeforeAdapter: func(store.Effect) { stop("before_adapter") },
		AfterAdapter:  func(store.Effect, broker.Result) { stop("after_adapter") },
	}
}

// gated is the controller's launcher view with the gate's launcher points;
// a call stopped at one fails once released, as the crashed kernel's
// launcher connection does.
type gated struct {
	domain.ExecutionDomain
	g *gate
}

func (d *gated) Create(ctx context.Context, s domain.Spec) (*domain.Running, error) {
	if d.g.hit("repair_create") {
		return nil, errKernelGone
	}
	return d.ExecutionDomain.Create(ctx, s)
}

func (d *gated) Destroy(ctx context.Context, id string) (*protocol.DomainState, error) {
	if d.g.hit("repair_destroy") {
		return nil, errKernelGone
	}
	return d.ExecutionDomain.Destroy(ctx, id)
}

func (d *gated) Checkpoint(ctx context.Context, id string) (*protocol.CheckpointResult, error) {
	if d.g.hit("post_commit_checkpoint") {
		return nil, errKernelGone
	}
	return d.ExecutionDomain.Checkpoint(ctx, id)
}

// crashWorker is the rig's worker with two more holds in epoch 1: stall
// (the fix made in the overlay, nothing proposed) and holdready (the effect
// evaluated ready, not committed).
func crashWorker(t *testing.T) string {
	t.Helper()
	w := worker
	for _, ins := range []struct{ before, probe string }{
		{"$G diff --binary", "stall"},
		{`c=$($E commit`, "holdready"},
	} {
		if strings.Count(w, ins.before) != 1 {
			t.Fatalf("the rig's worker changed: %q is not there once", ins.before)
		}
		w = strings.Replace(w, ins.before, fmt.Sprintf(`if [ "${PROBE:-}" = %s ] && [ "$AUTONOMIC_EPOCH" = 1 ]; then echo HOLD-%s; sleep 120; fi
%s`, ins.probe, ins.probe, ins.before), 1)
	}
	return w
}

// crashPoint is one place in an episode's life where the kernel dies.
type crashPoint struct {
	name  string
	probe string // the worker's PROBE
	// repairs is the spec's max_repairs (a repair and then a restart need 2).
	repairs int
	// gate is the gated point armed before the episode starts ("" none).
	gate string
	// wait is the effect state the test waits for before crashing (or
	// before containing, with contain).
	wait    store.EffectState
	contain bool
	// held is what the effect alive at the crash must end as (nil: any
	// terminal state; the point has no such effect or a racing one).
	held []store.EffectState
	// landed: the held effect's commit is on the authoritative repo before
	// the restart, so the resumed worker must not land another.
	landed bool
}

var crashPoints = []crashPoint{
	{name: "after_start", repairs: 1},
	{name: "worker_before_proposing", probe: "stall", repairs: 1},
	{name: "after_prepare", probe: "hold", repairs: 1, wait: store.Prepared, held: []store.EffectState{store.Stale}},
	{name: "after_evaluate_ready", probe: "holdready", repairs: 1, wait: store.Ready, held: []store.EffectState{store.Stale}},
	{name: "commit_intent", gate: "commit_intent", repairs: 1, held: []store.EffectState{store.Aborted}},
	{name: "committing_before_adapter", gate: "before_adapter", repairs: 1, held: []store.EffectState{store.Failed, store.Aborted}},
	{name: "adapter_acted_before_outcome", gate: "after_adapter", repairs: 1, held: []store.EffectState{store.Committed}, landed: true},
	{name: "committed_before_checkpoint", gate: "post_commit_checkpoint", repairs: 1, held: []store.EffectState{store.Committed},
		landed: true},
	{name: "repair_before_destroy", probe: "hold", gate: "repair_destroy", repairs: 2, wait: store.Prepared, contain: true,
		held: []store.EffectState{store.Stale}},
	{name: "repair_before_restore", probe: "hold", gate: "repair_create", repairs: 2, wait: store.Prepared, contain: true,
		held: []store.EffectState{store.Stale}},
}

// TestKernelKilledAtRandomPoints is issue 6 §7: the kernel is killed at
// points covering an episode's life — a kernel process (this test binary
// re-executed, running store, broker, launcher view and controller) driven
// to the point and SIGKILLed there, nothing cleaned up — and a new kernel on
// the same database and launcher recovers. Whatever the point,
// no effect is lost (every effect ends settled, and the fix lands on the
// authoritative repository exactly once) or done twice (no effect's
// trailer is on two commits), every domain the crashed kernel launched is
// destroyed and proven gone, and the ledger verifies. The order of the
// points is drawn from a seed (AUTONOMIC_CRASH_SEED overrides it);
// AUTONOMIC_CRASH_POINTS (comma-separated names) runs a subset.
func TestKernelKilledAtRandomPoints(t *testing.T) {
	if c := os.Getenv(crashChildEnv); c != "" {
		crashChild(t, c)
		return
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("AUTONOMIC_CRASH_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("AUTONOMIC_CRASH_SEED: %v", err)
		}
		seed = v
	}
	points := slices.Clone(crashPoints)
	if s := os.Getenv("AUTONOMIC_CRASH_POINTS"); s != "" {
		names := strings.Split(s, ",")
		points = slices.DeleteFunc(points, func(p crashPoint) bool { return !slices.Contains(names, p.name) })
	}
	rand.New(rand.NewSource(seed)).Shuffle(len(points), func(i, j int) { points[i], points[j] = points[j], points[i] })
	order := make([]string, len(points))
	for i, p := range points {
		order[i] = p.name
	}
	t.Logf("AUTONOMIC_CRASH_SEED=%d order %v", seed, order)
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) { crashAt(t, p) })
	}
}

// crashChildEnv carries a crashKernel to the re-executed test binary.
const crashChildEnv = "AUTONOMIC_EPISODE_CRASH_CHILD"

// crashReached prefixes the child's one report line: it is at the point.
const crashReached = "CRASH-REACHED "

// crashKernel is what the kernel process to be killed needs: the parent's
// world and rig, and the point.
type crashKernel struct {
	Point    string
	Bed      testbed.Bed
	DB       string
	URL      string
	AdminURL string
	Repo     string
	Base     string
	Payloads string
}

// crashReport is what the child says once at the point.
type crashReport struct {
	ID         uuid.UUID
	LauncherID string
	Epoch      int64
	LeaseID    uuid.UUID
	Held       uuid.UUID
	Launched   []string // every domain it created for the episode
}

// crashChildWorld is TestMain in the child: the parent's bed.
func crashChildWorld(c string) error {
	var k crashKernel
	if err := json.Unmarshal([]byte(c), &k); err != nil {
		return err
	}
	shared.bed = &k.Bed
	return nil
}

func crashAt(t *testing.T, p crashPoint) {
	// A liveness bound, not a speed target: a point takes 20-30 s here,
	// and CI runs other packages' kernels and databases beside it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newRig(t, ctx, "episode_crash")
	rep := runCrashKernel(t, ctx, r, p)
	id, held := rep.ID, rep.Held
	if held == uuid.Nil && p.held != nil {
		held = oneUnsettledOrLast(t, ctx, r, id)
	}
	t.Logf("kernel process SIGKILLed at %s: %+v", p.name, rep)

	// Restart.
	r.boot(t, ctx)
	rec, err := r.k.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v (%+v)", err, rec)
	}
	if len(rec.Resumed) != 1 || len(rec.Contained) != 0 || len(rec.Skipped) != 0 {
		t.Fatalf("recovery: %+v", rec)
	}
	for _, lid := range rep.Launched {
		if !slices.Contains(rec.Destroyed, lid) {
			t.Errorf("recovery did not destroy %s: %v", lid, rec.Destroyed)
		}
		if st, err := shared.bed.Domains().Inspect(ctx, lid); err != nil || st.Exists || st.Populated || st.Processes != 0 {
			t.Errorf("fenced domain %s after restart: %+v, %v", lid, st, err)
		}
	}
	e2 := rec.Resumed[0]
	s := e2.Status()
	if e2.ID() != id || s.State != episode.Running || s.Epoch != rep.Epoch+1 || s.LeaseID == rep.LeaseID {
		t.Fatalf("resumed: %+v (before the crash %+v)", s, rep)
	}
	if held != uuid.Nil && p.held != nil {
		if eff, err := r.st.Effect(ctx, held); err != nil || !slices.Contains(p.held, eff.State) {
			t.Fatalf("the effect held at the crash: %v, %v; want one of %v", eff.State, err, p.held)
		}
	}

	x := nextExit(t, ctx, e2)
	out := string(x.Output)
	t.Logf("generation %d epoch %d worker:\n%s", x.Generation, x.Epoch, out)
	if x.Epoch != s.Epoch {
		t.Fatalf("worker exit of epoch %d, want the resumed %d", x.Epoch, s.Epoch)
	}
	if !p.landed && !strings.Contains(out, "STATE=committed") && !committedBefore(t, ctx, r, id, s.Epoch) {
		t.Fatalf("nothing committed the fix: %+v\n%s", x.Exited, out)
	}
	if p.landed && strings.Contains(out, "STATE=committed") {
		t.Fatalf("the resumed worker committed the landed fix again:\n%s", out)
	}
	if err := e2.End(ctx, episode.Completed, "crash test"); err != nil {
		t.Fatal(err)
	}
	checkCrashInvariants(t, ctx, r, id)
}

// crashChild is the kernel process to be killed: it boots on the parent's
// rig, drives an episode to the point, reports and waits there for its
// SIGKILL (a gated call never returns).
func crashChild(t *testing.T, c string) {
	var k crashKernel
	if err := json.Unmarshal([]byte(c), &k); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(crashPoints, func(p crashPoint) bool { return p.name == k.Point })
	if i < 0 {
		t.Fatalf("no crash point %q", k.Point)
	}
	p := crashPoints[i]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := &gate{}
	r := &rig{db: k.DB, url: k.URL, adminURL: k.AdminURL, repo: k.Repo, base: k.Base}
	r.opts.hooks = g.hooks()
	r.opts.config = []func(*episode.Config){func(c *episode.Config) { c.Domains = &gated{ExecutionDomain: c.Domains, g: g} }}
	var err error
	if r.payloads, err = broker.OpenPayloads(k.Payloads); err != nil {
		t.Fatal(err)
	}
	r.boot(t, ctx)
	// A broker admits nothing before its reconciliation.
	if _, err := r.b.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	spec := r.spec(map[string]string{"PROBE": p.probe})
	spec.Argv = []string{"/bin/bash", "-c", crashWorker(t)}
	spec.MaxRepairs = p.repairs
	var reached, release chan struct{}
	// The broker's points are armed before the worker runs; the launcher's
	// after Start, which creates and checkpoints the first generation.
	launcherPoint := p.contain || p.gate == "post_commit_checkpoint"
	if p.gate != "" && !launcherPoint {
		reached, release = g.arm(p.gate)
	}
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	id := e.ID()
	if p.gate != "" && launcherPoint && !p.contain {
		reached, release = g.arm(p.gate)
	}

	// Drive the episode to the point.
	var held uuid.UUID
	if p.wait != "" {
		held = waitEffect(t, ctx, r, e, p.wait)
	}
	if p.contain {
		reached, release = g.arm(p.gate)
		e.Contain("test: contain to crash in the repair")
	}
	if p.name == "worker_before_proposing" {
		// The worker runs (it never proposes in epoch 1).
		for {
			st, err := shared.bed.Domains().Inspect(ctx, e.Status().LauncherID)
			if err == nil && st.Processes > 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the worker never ran: %+v, %v", st, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if reached != nil {
		select {
		case <-reached:
		case <-ctx.Done():
			t.Fatalf("point %s never reached: %+v", p.gate, e.Status())
		}
	}
	if held == uuid.Nil && p.held != nil {
		held = oneUnsettledOrLast(t, ctx, r, id)
	}
	if p.gate == "post_commit_checkpoint" {
		// The commit is recorded; only its checkpoint is missing.
		for {
			eff, err := r.st.Effect(ctx, held)
			if err == nil && eff.State == store.Committed {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the commit was never recorded: %+v, %v", eff.State, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	launched := []string{}
	for lid := range r.dom.created(id.String()) {
		launched = append(launched, lid)
	}
	st := e.Status()
	b, _ := json.Marshal(crashReport{ID: id, LauncherID: st.LauncherID, Epoch: st.Epoch, LeaseID: st.LeaseID, Held: held, Launched: launched})
	fmt.Printf("\n%s%s\n", crashReached, b)
	_ = release
	select {} // SIGKILLed here
}

// runCrashKernel runs the kernel process for point p on r's database,
// waits for it to reach the point and SIGKILLs it.
func runCrashKernel(t *testing.T, ctx context.Context, r *rig, p crashPoint) crashReport {
	t.Helper()
	k, _ := json.Marshal(crashKernel{Point: p.name, Bed: *shared.bed, DB: r.db, URL: r.url, AdminURL: r.adminURL,
		Repo: r.repo, Base: r.base, Payloads: r.payloadsDir})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Files, not pipes the test copies: the launcher monitors the child
	// started outlive it and hold them.
	logf, err := os.CreateTemp(t.TempDir(), "kernel-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	cmd := exec.Command(exe, "-test.run=^TestKernelKilledAtRandomPoints$", "-test.v")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+string(k))
	cmd.Stdout, cmd.Stderr = wr, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wr.Close()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(rd)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	output := func() string {
		b, _ := os.ReadFile(logf.Name())
		return string(b)
	}
	var rep crashReport
	for reached := false; !reached; {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("the kernel process ended before %s: %v\n%s", p.name, cmd.ProcessState, output())
			}
			if v, found := strings.CutPrefix(l, crashReached); found {
				if err := json.Unmarshal([]byte(v), &rep); err != nil {
					t.Fatal(err)
				}
				reached = true
			} else {
				t.Log("kernel process: " + l)
			}
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the kernel process never reached %s\n%s", p.name, output())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the kernel process was not killed by SIGKILL: %v", cmd.ProcessState)
	}
	return rep
}

// waitEffect waits for an effect of the episode in state want. The worker
// holds in epoch 1 once it has one: its exit first fails the test at once,
// with what it printed.
func waitEffect(t *testing.T, ctx context.Context, r *rig, e *episode.Episode, want store.EffectState) uuid.UUID {
	t.Helper()
	for {
		effs, err := r.st.ListEffects(ctx, e.ID(), 100)
		if err != nil {
			t.Fatalf("no effect reached %s: %v (%+v)", want, err, e.Status())
		}
		for _, eff := range effs {
			if eff.State == want {
				return eff.ID
			}
		}
		select {
		case x := <-e.WorkerExits():
			t.Fatalf("the worker exited before an effect reached %s: %+v; effects %+v\n%s", want, x.Exited, effs, x.Output)
		case <-ctx.Done():
			t.Fatalf("no effect reached %s: %+v (%+v)", want, effs, e.Status())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// oneUnsettledOrLast is the effect a commit point stopped: the episode's
// only effect so far.
func oneUnsettledOrLast(t *testing.T, ctx context.Context, r *rig, id uuid.UUID) uuid.UUID {
	t.Helper()
	effs, err := r.st.ListEffects(ctx, id, 100)
	if err != nil || len(effs) != 1 {
		t.Fatalf("effects at the crash point: %+v, %v", effs, err)
	}
	return effs[0].ID
}

// committedBefore reports whether an effect of an epoch before the resumed
// one committed (a crash right after start may race the worker's commit).
func committedBefore(t *testing.T, ctx context.Context, r *rig, id uuid.UUID, epoch int64) bool {
	t.Helper()
	effs, err := r.st.ListEffects(ctx, id, 100)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(effs, func(e store.Effect) bool { return e.State == store.Committed && e.Epoch < epoch })
}

// checkCrashInvariants: after the episode ended, every effect is settled
// and terminal, the fix is on the authoritative main exactly once, no
// effect's trailer is on two commits and every committed effect's is on
// one, every generation's domain is gone, and the ledger verifies.
func checkCrashInvariants(t *testing.T, ctx context.Context, r *rig, id uuid.UUID) {
	t.Helper()
	if u, err := r.st.Unsettled(ctx, id); err != nil || len(u) != 0 {
		t.Errorf("unsettled effects: %+v, %v", u, err)
	}
	effs, err := r.st.ListEffects(ctx, id, 100)
	if err != nil {
		t.Fatal(err)
	}
	terminal := []store.EffectState{store.Committed, store.Aborted, store.Stale, store.Failed, store.Expired}
	states := map[uuid.UUID]store.EffectState{}
	for _, eff := range effs {
		states[eff.ID] = eff.State
		if !slices.Contains(terminal, eff.State) {
			t.Errorf("effect %s (epoch %d) ends %s", eff.ID, eff.Epoch, eff.State)
		}
	}
	if n := testbed.Git(t, r.repo, "rev-list", "--count", r.base+"..refs/heads/main"); n != "1" {
		t.Errorf("%s commits on the authoritative main, want the fix once", n)
	}
	trailers := map[uuid.UUID]int{}
	for _, oid := range strings.Fields(testbed.Git(t, r.repo, "rev-list", "--all")) {
		for _, line := range strings.Split(testbed.Git(t, r.repo, "log", "-1", "--format=%B", oid), "\n") {
			if v, ok := strings.CutPrefix(line, broker.TrailerKey+":"); ok {
				eid, err := uuid.Parse(strings.TrimSpace(v))
				if err != nil {
					t.Errorf("commit %s: trailer %q", oid, line)
					continue
				}
				trailers[eid]++
			}
		}
	}
	for eid, n := range trailers {
		if n != 1 || states[eid] != store.Committed {
			t.Errorf("effect %s: %d commits with its trailer, state %q", eid, n, states[eid])
		}
	}
	for eid, st := range states {
		if st == store.Committed && trailers[eid] != 1 {
			t.Errorf("committed effect %s has %d commits with its trailer", eid, trailers[eid])
		}
	}
	gens, err := r.st.Generations(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gens {
		lid := fmt.Sprintf("%s-g%d", id, g.Generation)
		if st, err := shared.bed.Domains().Inspect(ctx, lid); err != nil || st.Exists || st.Populated || st.Processes != 0 {
			t.Errorf("domain %s after the episode ended: %+v, %v", lid, st, err)
		}
	}
	if rep, err := r.st.VerifyLedger(ctx, id); err != nil {
		t.Errorf("ledger: %+v, %v", rep, err)
	}
}
