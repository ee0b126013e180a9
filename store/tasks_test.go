package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/autonomic-kernel/autonomic/protocol"
)

func submit(t *testing.T, s *Postgres, project string, priority, class int) Task {
	t.Helper()
	tk, err := s.SubmitTask(ctxT(t), NewTask{Project: project, Priority: priority, MinClass: class, Submitter: "uid:1000",
		Spec: []byte(fmt.Sprintf(`{"intent":"task %d"}`, priority))})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func claim(t *testing.T, s *Postgres, c Claim) (Task, bool) {
	t.Helper()
	if c.TTL == 0 {
		c.TTL = time.Minute
	}
	tk, ok, err := s.ClaimTask(ctxT(t), c)
	if err != nil {
		t.Fatal(err)
	}
	return tk, ok
}

func verifyTask(t *testing.T, s *Postgres, id uuid.UUID) {
	t.Helper()
	rep, err := s.VerifyTaskLedger(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("task %s ledger: %v", id, rep.Broken)
	}
}

// TestTaskClaimOrder: the first ready task is the highest priority, then
// the oldest; a task needing more autonomy than the kernel has waits; a
// project at its cap waits while another project's task goes.
func TestTaskClaimOrder(t *testing.T) {
	e := newEnv(t)
	s := e.store
	low := submit(t, s, "alpha", 0, 3)
	high := submit(t, s, "alpha", 10, 3)
	needs4 := submit(t, s, "alpha", 20, 4)
	other := submit(t, s, "beta", -5, 3)
	caps := map[string]int{"alpha": 1}

	got, ok := claim(t, s, Claim{MaxClass: 3, ProjectCaps: caps})
	if !ok || got.ID != high.ID {
		t.Fatalf("first claim = %v %v, want the priority 10 task (the priority 20 one needs class 4)", got.ID, ok)
	}
	if got.State != TaskClaimed || got.Attempts != 1 || got.Claim == nil || got.Claim.Token != 1 {
		t.Fatalf("claimed task = %+v", got)
	}
	// alpha is at its cap: beta's lower-priority task goes first.
	if got, ok = claim(t, s, Claim{MaxClass: 3, ProjectCaps: caps}); !ok || got.ID != other.ID {
		t.Fatalf("second claim = %v %v, want beta's (alpha is at its cap)", got.ID, ok)
	}
	if _, ok = claim(t, s, Claim{MaxClass: 3, ProjectCaps: caps}); ok {
		t.Fatal("a third claim went through alpha's cap")
	}
	// The default cap applies to projects the caps do not name.
	if _, ok = claim(t, s, Claim{MaxClass: 4, DefaultCap: 1}); ok {
		t.Fatal("a claim went through the default cap")
	}
	if got, ok = claim(t, s, Claim{MaxClass: 4}); !ok || got.ID != needs4.ID {
		t.Fatalf("uncapped class 4 claim = %v %v, want the class 4 task", got.ID, ok)
	}
	if got, ok = claim(t, s, Claim{MaxClass: 4}); !ok || got.ID != low.ID {
		t.Fatalf("last claim = %v %v, want the oldest low task", got.ID, ok)
	}
	for _, id := range []uuid.UUID{low.ID, high.ID, needs4.ID, other.ID} {
		verifyTask(t, s, id)
	}
}

// TestTaskClaimsAreExclusive: three kernels claim concurrently from one
// queue; every task is claimed exactly once and every ledger verifies.
func TestTaskClaimsAreExclusive(t *testing.T) {
	e := newEnv(t)
	kernels := []*Postgres{e.store, e.open("kernel-b", 0), e.open("kernel-c", 0)}
	const n = 60
	for i := 0; i < n; i++ {
		submit(t, e.store, fmt.Sprintf("p%d", i%4), i%7, 3)
	}
	var mu sync.Mutex
	claimed := map[uuid.UUID]string{}
	var wg sync.WaitGroup
	errs := make(chan error, len(kernels))
	for _, k := range kernels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				tk, ok, err := k.ClaimTask(context.Background(), Claim{MaxClass: 4, TTL: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					return
				}
				mu.Lock()
				if prev, dup := claimed[tk.ID]; dup {
					errs <- fmt.Errorf("task %s claimed by %s and %s", tk.ID, prev, k.instance)
				}
				claimed[tk.ID] = k.instance
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(claimed) != n {
		t.Fatalf("%d tasks claimed, want %d", len(claimed), n)
	}
	for id := range claimed {
		verifyTask(t, e.store, id)
	}
}

// TestTaskTakeover: a claim that expires before its episode started goes
// back to the queue; a running task whose episode's owner stopped renewing
// goes back for takeover, and the kernel that lost it can no longer move
// it (its token is stale), nor can its store handle act on the episode
// once the taker holds it.
func TestTaskTakeover(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a := e.open("host-a", time.Second)
	b := e.open("host-b", time.Second)

	// A claim that is never started nor renewed.
	tk := submit(t, a, "p", 0, 3)
	got, _ := claim(t, a, Claim{MaxClass: 3, TTL: 500 * time.Millisecond})
	time.Sleep(700 * time.Millisecond)
	sw, err := b.SweepTasks(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(sw.Requeued) != 1 || sw.Requeued[0] != tk.ID {
		t.Fatalf("sweep = %+v, want the expired claim requeued", sw)
	}
	if _, err := a.StartTask(ctx, tk.ID, got.Claim.Token, uuid.New()); !isCode(err, protocol.CodeStaleAuthority) {
		t.Fatalf("start after the claim was swept: %v, want stale_authority", err)
	}

	// B claims it and runs it as an episode, then stops renewing (dies).
	got, ok := claim(t, b, Claim{MaxClass: 3})
	if !ok || got.ID != tk.ID || got.Claim.Token != 2 || got.Attempts != 2 {
		t.Fatalf("re-claim = %+v", got)
	}
	ep, err := b.CreateEpisode(ctx, NewEpisode{Spec: []byte(`{"intent":"t"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, err = b.StartTask(ctx, tk.ID, got.Claim.Token, ep.ID); err != nil || got.State != TaskRunning {
		t.Fatalf("start = %+v, %v", got, err)
	}
	// While the episode's owner renews, the task is not swept even though
	// its claim would have expired.
	if _, err := b.AcquireOwnership(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	if sw, _ := a.SweepTasks(ctx, 0); len(sw.Requeued)+len(sw.Ended) != 0 {
		t.Fatalf("a live episode's task was swept: %+v", sw)
	}
	time.Sleep(1200 * time.Millisecond)
	if sw, _ = a.SweepTasks(ctx, 0); len(sw.Requeued) != 1 {
		t.Fatalf("sweep after the owner died = %+v", sw)
	}
	got, ok = claim(t, a, Claim{MaxClass: 3})
	if !ok || got.EpisodeID == nil || *got.EpisodeID != ep.ID || got.Takeovers != 1 || got.Attempts != 2 {
		t.Fatalf("takeover claim = %+v", got)
	}
	// Its owner comes back before the taker takes the episode: the taker
	// is refused, and gives the task back to the episode that runs it,
	// not counted as a takeover.
	if _, err := b.AcquireOwnership(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AcquireOwnership(ctx, ep.ID); !isCode(err, protocol.CodeStaleAuthority) {
		t.Fatalf("the taker took a renewed episode: %v", err)
	}
	if got, err = a.ResumeTask(ctx, tk.ID, got.Claim.Token, "owner renewed"); err != nil || got.State != TaskRunning || got.Takeovers != 0 {
		t.Fatalf("resume = %+v, %v", got, err)
	}
	time.Sleep(1200 * time.Millisecond)
	if sw, _ = a.SweepTasks(ctx, 0); len(sw.Requeued) != 1 {
		t.Fatalf("sweep after the owner died again = %+v", sw)
	}
	got, ok = claim(t, a, Claim{MaxClass: 3})
	if !ok || got.Takeovers != 1 {
		t.Fatalf("second takeover claim = %+v", got)
	}
	// The taker holds the episode; the dead host's handle is fenced.
	if _, err := a.AcquireOwnership(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireOwnership(ctx, ep.ID); !isCode(err, protocol.CodeStaleAuthority) {
		t.Fatalf("the dead host re-took the episode: %v", err)
	}
	if _, err := b.ReleaseTask(ctx, tk.ID, 2, true, "x"); !isCode(err, protocol.CodeStaleAuthority) {
		t.Fatalf("the dead host moved the task: %v", err)
	}
	// The taker fences and ends the old episode and runs a new one.
	if _, err := a.EndEpisode(ctx, EndEpisode{EpisodeID: ep.ID, Epoch: 1, State: EpisodeAborted, Reason: "host lost"}); err != nil {
		t.Fatal(err)
	}
	ep2, err := a.CreateEpisode(ctx, NewEpisode{Spec: []byte(`{"intent":"t"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTask(ctx, tk.ID, got.Claim.Token, ep2.ID); err != nil {
		t.Fatal(err)
	}
	// The old episode's end does not end the task: it runs ep2 now.
	if _, err := a.EndTask(ctx, tk.ID, ep.ID, EpisodeAborted, "late"); !isCode(err, protocol.CodeStaleAuthority) {
		t.Fatalf("ending the task by its old episode: %v", err)
	}
	if _, err := a.EndEpisode(ctx, EndEpisode{EpisodeID: ep2.ID, Epoch: 1, State: EpisodeCompleted, Reason: "landed: x"}); err != nil {
		t.Fatal(err)
	}
	if sw, err = b.SweepTasks(ctx, 0); err != nil || len(sw.Ended) != 1 {
		t.Fatalf("sweep after the end = %+v, %v", sw, err)
	}
	final, err := b.Task(ctx, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != TaskEnded || final.Outcome != "completed" || final.Reason != "landed: x" || len(final.Episodes) != 2 || final.Claim != nil {
		t.Fatalf("final task = %+v", final)
	}
	verifyTask(t, a, tk.ID)
}

// TestTaskCancel: a queued task is cancelled at once; a running one asks
// its kernel, and ends cancelled when its episode has ended; a final task
// cannot be cancelled.
func TestTaskCancel(t *testing.T) {
	e := newEnv(t)
	s := e.store
	ctx := ctxT(t)
	q := submit(t, s, "p", 0, 3)
	got, err := s.CancelTask(ctx, q.ID, "uid:1000")
	if err != nil || got.State != TaskCancelled || got.EndedAt == nil {
		t.Fatalf("cancel queued = %+v, %v", got, err)
	}
	if _, err := s.CancelTask(ctx, q.ID, "uid:1000"); !isCode(err, protocol.CodeIllegalTransition) {
		t.Fatalf("cancel a cancelled task: %v", err)
	}
	if _, ok := claim(t, s, Claim{MaxClass: 4}); ok {
		t.Fatal("a cancelled task was claimed")
	}
	r := submit(t, s, "p", 0, 3)
	c, _ := claim(t, s, Claim{MaxClass: 4})
	ep, err := s.CreateEpisode(ctx, NewEpisode{Spec: []byte(`{"intent":"t"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartTask(ctx, r.ID, c.Claim.Token, ep.ID); err != nil {
		t.Fatal(err)
	}
	if got, err = s.CancelTask(ctx, r.ID, "uid:1000"); err != nil || got.State != TaskRunning || !got.CancelRequested {
		t.Fatalf("cancel running = %+v, %v", got, err)
	}
	held, err := s.HeartbeatTasks(ctx, time.Minute)
	if err != nil || len(held) != 1 || !held[0].CancelRequested {
		t.Fatalf("heartbeat = %+v, %v: the kernel must see the request", held, err)
	}
	if _, err := s.EndEpisode(ctx, EndEpisode{EpisodeID: ep.ID, Epoch: 1, State: EpisodeAborted, Reason: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SweepTasks(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.Task(ctx, r.ID); got.State != TaskCancelled || got.Outcome != "aborted" {
		t.Fatalf("cancelled running task = %+v", got)
	}
	verifyTask(t, s, r.ID)
}

// TestTaskInputRefused: bad submissions change nothing; the task ledger
// is append-only for the kernel's role.
func TestTaskInputRefused(t *testing.T) {
	e := newEnv(t)
	s := e.store
	ctx := ctxT(t)
	for name, req := range map[string]NewTask{
		"project":   {Project: "Bad Project", Submitter: "u", Spec: []byte(`{}`)},
		"priority":  {Project: "p", Priority: 5000, Submitter: "u", Spec: []byte(`{}`)},
		"class":     {Project: "p", MinClass: 5, Submitter: "u", Spec: []byte(`{}`)},
		"submitter": {Project: "p", Spec: []byte(`{}`)},
		"spec":      {Project: "p", Submitter: "u", Spec: []byte(`[1]`)},
		"dup key":   {Project: "p", Submitter: "u", Spec: []byte(`{"a":1,"a":2}`)},
	} {
		if _, err := s.SubmitTask(ctx, req); !isCode(err, protocol.CodeInvalidField) {
			t.Errorf("%s: %v, want invalid_field", name, err)
		}
	}
	if list, _ := s.Tasks(ctx, TaskFilter{}); len(list) != 0 {
		t.Fatalf("refused submissions left %d tasks", len(list))
	}
	if _, _, err := s.ClaimTask(ctx, Claim{MaxClass: 3, TTL: time.Hour}); !isCode(err, protocol.CodeInvalidField) {
		t.Fatalf("claim ttl over the bound: %v", err)
	}
	tk := submit(t, s, "p", 0, 3)
	kernel, err := pgx.Connect(ctx, e.cluster.KernelConnString(e.db))
	if err != nil {
		t.Fatal(err)
	}
	defer kernel.Close(ctx)
	for _, q := range []string{`UPDATE task_events SET kind = 'x' WHERE task_id = $1`, `DELETE FROM task_events WHERE task_id = $1`} {
		if _, err := kernel.Exec(ctx, q, tk.ID); err == nil {
			t.Fatalf("the kernel role ran %q on the task ledger", q)
		}
	}
	// Nor can the owner without disabling the trigger.
	if _, err := e.admin().Exec(ctx, `UPDATE task_events SET kind = 'x' WHERE task_id = $1`, tk.ID); err == nil {
		t.Fatal("the task ledger was rewritten")
	}
	verifyTask(t, s, tk.ID)
}

func isCode(err error, c protocol.Code) bool { return code(err) == c }
