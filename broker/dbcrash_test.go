package broker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/pgcluster"
	"github.com/autonomic-kernel/autonomic/store/storetest"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
)

// dbCrash is a cluster of one test's own, which it crashes: SIGKILL to the
// postmaster and every backend (pgcluster.Kill), then a restart with crash
// recovery. Before each step the WAL writer is frozen (SIGSTOP), so an
// asynchronous commit reaches the WAL file only when a later synchronous
// commit flushes it: the kill then loses exactly what no durable commit
// carried — what a power cut loses before the WAL writer's next flush —
// rather than whatever the WAL writer's timer happened to have written.
type dbCrash struct {
	t *testing.T
	c *pgcluster.Cluster
}

func startDBCrash(t *testing.T) *dbCrash {
	if testHarness.Cluster == nil {
		privileged.Skip(t, "no PostgreSQL cluster: "+testHarness.Err.Error())
	}
	dir, err := os.MkdirTemp("", "autonomic-dbcrash-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := storetest.StartCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	d := &dbCrash{t: t, c: c}
	// Nothing else may flush the WAL behind the test's back: no
	// autovacuum commits, no timed checkpoint, no background writer
	// writing a data page (which flushes the WAL up to its LSN first).
	d.admin(func(conn *pgx.Conn) error {
		for _, q := range []string{`ALTER SYSTEM SET autovacuum = off`, `ALTER SYSTEM SET checkpoint_timeout = '1h'`,
			`ALTER SYSTEM SET bgwriter_lru_maxpages = 0`, `SELECT pg_reload_conf()`} {
			if _, err := conn.Exec(ctxT(t), q); err != nil {
				return err
			}
		}
		return nil
	})
	return d
}

func (d *dbCrash) admin(f func(*pgx.Conn) error) {
	d.t.Helper()
	conn, err := pgx.Connect(ctxT(d.t), d.c.AdminConnString("postgres"))
	if err != nil {
		d.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := f(conn); err != nil {
		d.t.Fatal(err)
	}
}

// freezeWALWriter stops the WAL writer until the next crash.
func (d *dbCrash) freezeWALWriter() {
	d.t.Helper()
	d.admin(func(conn *pgx.Conn) error {
		var pid int
		if err := conn.QueryRow(ctxT(d.t), `SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'`).Scan(&pid); err != nil {
			return err
		}
		return syscall.Kill(pid, syscall.SIGSTOP)
	})
}

func (d *dbCrash) kill() {
	d.t.Helper()
	if err := d.c.Kill(); err != nil {
		d.t.Fatal(err)
	}
}

// restart brings the cluster back and waits until s reaches it.
func (d *dbCrash) restart(s *store.Postgres, episode uuid.UUID) {
	d.t.Helper()
	if err := d.c.Restart(ctxT(d.t)); err != nil {
		d.t.Fatal(err)
	}
	// Until a burst as wide as the pool succeeds: each burst takes every
	// idle connection at once, and one that died with the old server fails
	// and makes the pool drop all its idle ones, so none is left to fail a
	// step of the walk (authority_unavailable is the right answer to a
	// worker then, but not what a step measures).
	deadline := time.Now().Add(30 * time.Second)
	for {
		errs := make(chan error, poolBurst)
		for range poolBurst {
			go func() {
				_, err := s.Episode(ctxT(d.t), episode)
				errs <- err
			}()
		}
		var err error
		for range poolBurst {
			err = errors.Join(err, <-errs)
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("store did not come back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// poolBurst is the harness store's MaxConns (harness_test.go): a burst that wide touches
// every pooled connection.
const poolBurst = 24

// countingAdapter counts the adapter's commits per effect: a double
// execution is a second count, whatever the target makes of it.
type countingAdapter struct {
	Adapter
	mu      sync.Mutex
	commits map[uuid.UUID]int
}

func (c *countingAdapter) Commit(ctx context.Context, r Request) Result {
	c.mu.Lock()
	c.commits[r.EffectID]++
	c.mu.Unlock()
	return c.Adapter.Commit(ctx, r)
}

func (c *countingAdapter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commits[uuid.MustParse(id)]
}

// TestHorizonSurvivesDatabaseCrash: the database crashes after each step of
// an artifact's walk across the horizon. Only committing (the intent the
// adapter acts under) and the outcome are durable on their own; a crash
// loses at most the proposal, the evaluation or commit_intent that no later
// durable commit carried, the worker redoes it, and no crash loses a
// committed effect or makes the adapter act twice. Where the crash and
// restart fall between two transactions of one commit, the durable one
// re-checks, under its locks, what the lost one had recorded, so the fence
// holds although the commit it depended on is gone.
func TestHorizonSurvivesDatabaseCrash(t *testing.T) {
	d := startDBCrash(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if err := d.c.CreateDatabase(ctx, "horizon"); err != nil {
		t.Fatal(err)
	}
	cancel()
	pub := filepath.Join(t.TempDir(), "pub")
	if err := os.Mkdir(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	counter := &countingAdapter{Adapter: &Artifact{Targets: map[string]ArtifactTarget{"releases": {Dir: pub}}}, commits: map[uuid.UUID]int{}}
	// at is the step's crash, run at the hook of that name.
	var at struct {
		sync.Mutex
		point string
		crash func()
	}
	hook := func(point string) func(store.Effect) {
		return func(store.Effect) {
			at.Lock()
			defer at.Unlock()
			if at.point == point {
				at.point = ""
				at.crash()
			}
		}
	}
	e := newEnvOn(t, d.c, "horizon", func(e *env, cfg *Config) {
		cfg.Adapters = []Adapter{counter}
		// Why a worker request was refused, shown when the walk fails.
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: newTestLog(t)})
		cfg.Hooks = &Hooks{AfterIntent: hook("after_intent"), BeforeAdapter: hook("before_adapter")}
		cfg.Hooks.AfterAdapter = func(ef store.Effect, _ Result) { hook("after_adapter")(ef) }
	})
	crashAt := func(point string, crash func()) {
		at.Lock()
		at.point, at.crash = point, crash
		at.Unlock()
	}
	restart := func() { d.restart(e.store, e.ep.ID) }

	// The worker's three calls.
	prepare := func(name string) *protocol.EffectResult {
		return mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": name}, []byte("bytes of "+name))))
	}
	evaluate := func(p *protocol.EffectResult) *protocol.WorkerResponse {
		req := byEffectReq(e, protocol.WorkerEvaluate, p)
		req.Approval = e.approve(p.ID)
		return e.do(req)
	}
	commit := func(p *protocol.EffectResult) *protocol.WorkerResponse {
		return e.do(byEffectReq(e, protocol.WorkerCommit, p))
	}
	// durable is any later synchronous commit: its flush carries every
	// commit before it.
	durable := func() {
		if _, err := e.store.AcquireOwnership(ctxT(t), e.ep.ID); err != nil {
			t.Fatal(err)
		}
	}
	state := func(id string) store.EffectState {
		ef, err := e.store.Effect(ctxT(t), uuid.MustParse(id))
		if err != nil {
			if protocol.AsWire(err).Code == protocol.CodeNotFound {
				return ""
			}
			t.Fatal(err)
		}
		return ef.State
	}
	published := func(name string) bool {
		b, err := os.ReadFile(filepath.Join(pub, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err == nil && string(b) != "bytes of "+name {
			t.Fatalf("%s holds %q", name, b)
		}
		return err == nil
	}
	// consistent: the ledger verifies and ends, for every effect, in the
	// state its row holds; nothing is left to reconcile.
	consistent := func(step string) {
		t.Helper()
		r, err := e.store.VerifyLedger(ctxT(t), e.ep.ID)
		if err != nil || !r.OK() {
			t.Fatalf("%s: ledger: %+v %v", step, r, err)
		}
		evs, err := e.store.Events(ctxT(t), e.ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		last := map[string]string{}
		for _, ev := range evs {
			var b struct {
				EffectID string   `json:"effect_id"`
				To       string   `json:"to"`
				Staled   []string `json:"staled_effects"`
			}
			_ = json.Unmarshal(ev.Body, &b)
			switch ev.Kind {
			case "epoch_advanced":
				for _, id := range b.Staled {
					last[id] = string(store.Stale)
				}
			case "effect_proposed":
				last[b.EffectID] = string(store.Proposed)
			case "effect_transition":
				last[b.EffectID] = b.To
			}
		}
		for id, st := range last {
			if got := state(id); string(got) != st {
				t.Fatalf("%s: effect %s is %s, its ledger says %s", step, id, got, st)
			}
		}
		if un, err := e.store.Unsettled(ctxT(t), e.ep.ID); err != nil || len(un) != 0 {
			t.Fatalf("%s: unsettled after reconciliation: %+v %v", step, un, err)
		}
	}
	// finish walks an effect the crash left behind to committed, as the
	// worker would, and proves the adapter acted exactly once.
	finish := func(step string, p *protocol.EffectResult, name string) {
		t.Helper()
		if st := state(p.ID); st == store.Prepared {
			mustOK(t, evaluate(p))
		}
		if c := mustOK(t, commit(p)); c.State != string(store.Committed) {
			t.Fatalf("%s: redone commit is %s", step, c.State)
		}
		if !published(name) || counter.count(p.ID) != 1 {
			t.Fatalf("%s: published %v, adapter ran %d times", step, published(name), counter.count(p.ID))
		}
		consistent(step)
	}
	reconcile := func(step string, want store.EffectState) {
		t.Helper()
		st, err := e.broker.Reconcile(ctxT(t), e.ep.ID)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if want == "" && len(st) != 0 || want != "" && (len(st) != 1 || st[0].To != want) {
			t.Fatalf("%s: reconciled %+v, want %q", step, st, want)
		}
	}

	// 1. The proposal (with its prepare) is lost; the worker prepares again.
	d.freezeWALWriter()
	p := prepare("prepare.bin")
	d.kill()
	restart()
	if st := state(p.ID); st != "" {
		t.Fatalf("prepare: the proposal survived the crash as %s: the test did not crash where it meant to", st)
	}
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerStatus, p)), protocol.CodeNotFound)
	reconcile("prepare", "")
	consistent("prepare")
	finish("prepare", prepare("prepare.bin"), "prepare.bin")

	// 2. The evaluation is lost, the prepare a durable commit carried is
	// not. The commit re-checks under its locks and refuses; the worker
	// evaluates again.
	p = prepare("evaluate.bin")
	durable()
	d.freezeWALWriter()
	if r := mustOK(t, evaluate(p)); r.State != string(store.Ready) {
		t.Fatal(r.State)
	}
	d.kill()
	restart()
	if st := state(p.ID); st != store.Prepared {
		t.Fatalf("evaluate: after the crash the effect is %q, want prepared", st)
	}
	wantErr(t, commit(p), protocol.CodeIllegalTransition)
	if published("evaluate.bin") || counter.count(p.ID) != 0 {
		t.Fatal("evaluate: the adapter acted on a lost evaluation")
	}
	reconcile("evaluate", "")
	consistent("evaluate")
	finish("evaluate", p, "evaluate.bin")

	// 3. commit_intent is lost in a crash and restart inside the commit:
	// the durable committing transaction finds the effect ready again and
	// refuses, and the adapter never acts.
	p = prepare("intent.bin")
	mustOK(t, evaluate(p))
	durable()
	d.freezeWALWriter()
	crashAt("after_intent", func() { d.kill(); restart() })
	wantErr(t, commit(p), protocol.CodeIllegalTransition)
	if st := state(p.ID); st != store.Ready || published("intent.bin") || counter.count(p.ID) != 0 {
		t.Fatalf("intent: effect %s, published %v, adapter ran %d times", st, published("intent.bin"), counter.count(p.ID))
	}
	reconcile("intent", "")
	consistent("intent")
	finish("intent", p, "intent.bin")

	// 4 and 5. The database dies once committing is durable, before and
	// after the adapter acts: committing survives (and carries the
	// prepare, evaluation and commit_intent before it) although no other
	// commit flushed it, and reconciliation settles it from the target.
	for _, point := range []string{"before_adapter", "after_adapter"} {
		name := point + ".bin"
		d.freezeWALWriter()
		p = prepare(name)
		mustOK(t, evaluate(p))
		crashAt(point, d.kill)
		wantErr(t, commit(p), protocol.CodeCommitUnknown)
		restart()
		if st := state(p.ID); st != store.Committing {
			t.Fatalf("%s: after the crash the effect is %q, want committing", point, st)
		}
		reconcile(point, store.Committed)
		if !published(name) || counter.count(p.ID) != 1 {
			t.Fatalf("%s: published %v, adapter ran %d times", point, published(name), counter.count(p.ID))
		}
		wantErr(t, commit(p), protocol.CodeIllegalTransition)
		if counter.count(p.ID) != 1 {
			t.Fatalf("%s: the adapter acted again", point)
		}
		consistent(point)
	}

	// 6. The outcome is durable on its own.
	d.freezeWALWriter()
	p = prepare("outcome.bin")
	mustOK(t, evaluate(p))
	if c := mustOK(t, commit(p)); c.State != string(store.Committed) {
		t.Fatal(c.State)
	}
	d.kill()
	restart()
	if st := state(p.ID); st != store.Committed {
		t.Fatalf("outcome: after the crash the effect is %q, want committed", st)
	}
	reconcile("outcome", "")
	consistent("outcome")
	if !published("outcome.bin") || counter.count(p.ID) != 1 {
		t.Fatal("outcome: not published once")
	}

	// 7. The epoch fence across a lost commit_intent: the database crashes
	// and restarts inside the commit and the epoch advances before the
	// commit goes on. The effect is stale, committing is refused, and the
	// adapter never acts.
	p = prepare("fenced.bin")
	mustOK(t, evaluate(p))
	durable()
	d.freezeWALWriter()
	crashAt("after_intent", func() {
		d.kill()
		restart()
		if _, err := e.store.AdvanceEpoch(ctxT(t), store.AdvanceEpoch{EpisodeID: e.ep.ID, FromEpoch: p.Epoch, Reason: "fence"}); err != nil {
			t.Error(err)
		}
	})
	wantErr(t, commit(p), protocol.CodeStaleAuthority)
	if st := state(p.ID); st != store.Stale || published("fenced.bin") || counter.count(p.ID) != 0 {
		t.Fatalf("fence: effect %s, published %v, adapter ran %d times", st, published("fenced.bin"), counter.count(p.ID))
	}
	reconcile("fence", "")
	consistent("fence")
}

// testLog writes a logger's lines to t.Log until the test ends (a line from
// a goroutine that outlives it is dropped, not a panic).
type testLog struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func newTestLog(t *testing.T) *testLog {
	l := &testLog{t: t}
	t.Cleanup(func() { l.mu.Lock(); l.done = true; l.mu.Unlock() })
	return l
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
