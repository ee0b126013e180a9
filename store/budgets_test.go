package store

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/protocol"
)

func submitReserving(t *testing.T, s *Postgres, priority int, spend int64) Task {
	t.Helper()
	tk, err := s.SubmitTask(ctxT(t), NewTask{Project: "calc", Priority: priority, MinClass: 3, Submitter: "uid:1000",
		Spec: []byte(`{"intent":"x"}`), Reserve: Reserve{SpendMicroUSD: spend, Tokens: 1000, WallMS: 60000}})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func budgetOf(t *testing.T, s *Postgres) ProjectBudget {
	t.Helper()
	bs, err := s.ProjectBudgets(ctxT(t))
	if err != nil || len(bs) != 1 {
		t.Fatalf("budgets %+v, %v", bs, err)
	}
	return bs[0]
}

func count(t *testing.T, s *Postgres, id uuid.UUID, kind string) int {
	t.Helper()
	es, err := s.TaskEvents(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// TestReservationExhaustion: a task reserves its episode's caps when a
// kernel claims it; a project's hard cap admits a claim only while spent +
// reserved + its reserve fits below the emergency reserve (an emergency-
// priority task may use that too); a task held back says so once (one
// event, the project marked exhausted); a claim's end gives the reserve
// back and spends what its episode's relay charged; the budget's books
// always equal the tasks'.
func TestReservationExhaustion(t *testing.T) {
	e := newEnv(t)
	s := e.store
	ctx := ctxT(t)
	spendCap := int64(100)
	if _, err := s.SetProjectBudget(ctx, "calc", Caps{MaxSpend: &spendCap, Emergency: Reserve{SpendMicroUSD: 20}}); err != nil {
		t.Fatal(err)
	}
	urgent := submitReserving(t, s, EmergencyPriority, 30)
	a := submitReserving(t, s, 0, 30)
	b := submitReserving(t, s, 0, 30)
	c := submitReserving(t, s, 0, 30)
	cl := Claim{MaxClass: 3, TTL: time.Minute}

	got, ok := claim(t, s, cl)
	if !ok || got.ID != urgent.ID {
		t.Fatalf("first claim %v", got.ID)
	}
	if got, ok = claim(t, s, cl); !ok || got.ID != a.ID {
		t.Fatalf("second claim %v", got.ID)
	}
	// 60 held; another 30 would pass 80 (100 less the emergency 20).
	for i := 0; i < 3; i++ {
		if got, ok = claim(t, s, cl); ok {
			t.Fatalf("claim %d went over the budget: %v", i, got.ID)
		}
	}
	bg := budgetOf(t, s)
	if bg.Reserved.SpendMicroUSD != 60 || bg.Spent.SpendMicroUSD != 0 || bg.ExhaustedAt == nil {
		t.Fatalf("budget after the refusals: %+v", bg)
	}
	for _, tk := range []Task{b, c} {
		if n := count(t, s, tk.ID, "task_budget_exhausted"); n != 1 {
			t.Fatalf("task %s: %d budget_exhausted events, want one", tk.ID, n)
		}
		if got, _ := s.Task(ctx, tk.ID); got.Blocked == "" || got.State != TaskQueued {
			t.Fatalf("held-back task %+v", got)
		}
	}

	// Each held-back task waits on one budget Action naming it exactly.
	acts, err := s.Actions(ctx, uuid.Nil, false)
	if err != nil || len(acts) != 2 {
		t.Fatalf("open actions %+v, %v; want one per held-back task", acts, err)
	}
	byTask := map[uuid.UUID]Action{}
	for _, a := range acts {
		if a.TaskID == nil || a.Kind != TaskBudgetKind || a.TargetID != "calc" || a.EffectID != uuid.Nil {
			t.Fatalf("budget action %+v", a)
		}
		byTask[*a.TaskID] = a
	}
	if byTask[b.ID].PayloadDigest != b.SpecDigest || byTask[c.ID].PayloadDigest != c.SpecDigest {
		t.Fatalf("actions name other specs: %+v", byTask)
	}
	if n := count(t, s, c.ID, "action_opened"); n != 1 {
		t.Fatalf("%d actions opened for c", n)
	}

	// a's episode is charged 10 by its relay and ends: 30 given back, 10
	// spent; b fits now (10 + 30 + 30 <= 80), c does not.
	ep, err := s.CreateEpisode(ctx, NewEpisode{Spec: []byte(`{"intent":"a"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartTask(ctx, a.ID, 1, ep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetRelayBudget(ctx, ep.ID, 1000, 30); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ChargeRelay(ctx, ep.ID, RelayAmount{Spend: 10, Tokens: 100}, RelayAmount{Spend: 10, Tokens: 100}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndEpisode(ctx, EndEpisode{EpisodeID: ep.ID, Epoch: 1, State: EpisodeCompleted, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SweepTasks(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Task(ctx, a.ID); got.Spent.SpendMicroUSD != 10 || got.Spent.Tokens != 100 || got.held {
		t.Fatalf("ended task's spend %+v", got)
	}
	if bg = budgetOf(t, s); bg.Reserved.SpendMicroUSD != 30 || bg.Spent.SpendMicroUSD != 10 || bg.Spent.Tokens != 100 {
		t.Fatalf("budget after the end: %+v", bg)
	}
	if got, ok = claim(t, s, cl); !ok || got.ID != b.ID || got.Blocked != "" {
		t.Fatalf("claim after the end: %+v %v", got, ok)
	}
	if _, ok = claim(t, s, cl); ok {
		t.Fatal("c was claimed over the budget")
	}
	if a, _ := s.Action(ctx, byTask[b.ID].ID); a.State != ActionSuperseded {
		t.Fatalf("b's action after b was claimed: %s", a.State)
	}
	// The operator grants c the emergency reserve (10 + 60 + 30 = 100),
	// once: a replay records nothing, a denial after it is refused.
	ca := byTask[c.ID]
	if got, err := s.ResolveTaskAction(ctx, ca.ID, true, "uid:0"); err != nil || got.State != ActionApproved {
		t.Fatalf("approve: %+v, %v", got, err)
	}
	if _, err := s.ResolveTaskAction(ctx, ca.ID, true, "uid:0"); err != nil {
		t.Fatalf("replayed approval: %v", err)
	}
	if n := count(t, s, c.ID, "task_emergency_granted"); n != 1 {
		t.Fatalf("%d grants recorded", n)
	}
	if _, err := s.ResolveTaskAction(ctx, ca.ID, false, "uid:0"); code(err) != protocol.CodeIllegalTransition {
		t.Fatalf("deny after approve: %v", err)
	}
	if got, ok = claim(t, s, cl); !ok || got.ID != c.ID || got.EmergencyGranted {
		t.Fatalf("granted claim: %+v %v", got, ok)
	}
	// Spent: the next emergency-priority task does not fit (130 > 100);
	// its Action, denied, cancels it.
	urgent2 := submitReserving(t, s, EmergencyPriority+1, 30)
	if _, ok = claim(t, s, cl); ok {
		t.Fatal("a claim went past the cap")
	}
	acts, _ = s.Actions(ctx, uuid.Nil, false)
	if len(acts) != 1 || *acts[0].TaskID != urgent2.ID {
		t.Fatalf("open actions %+v", acts)
	}
	if _, err := s.ResolveTaskAction(ctx, acts[0].ID, false, "uid:0"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Task(ctx, urgent2.ID); got.State != TaskCancelled {
		t.Fatalf("denied task %s", got.State)
	}
	// An effect's Action is not answered this way.
	if _, err := s.ResolveTaskAction(ctx, uuid.New(), true, "uid:0"); code(err) != protocol.CodeNotFound {
		t.Fatalf("unknown action: %v", err)
	}
	// The books equal the tasks'.
	tasks, _ := s.Tasks(ctx, TaskFilter{Project: "calc"})
	var held, spent int64
	for _, tk := range tasks {
		if tk.held {
			held += tk.Reserve.SpendMicroUSD
		}
		spent += tk.Spent.SpendMicroUSD
		verifyTask(t, s, tk.ID)
	}
	if bg = budgetOf(t, s); bg.Reserved.SpendMicroUSD != held || bg.Spent.SpendMicroUSD != spent || held != 90 {
		t.Fatalf("budget %+v, tasks hold %d and spent %d", bg, held, spent)
	}
	// A budget set while a project's tasks run starts holding their
	// reserves, so their settling never drives it below zero.
	late, err := s.SubmitTask(ctx, NewTask{Project: "late", Submitter: "u", Spec: []byte(`{}`), Reserve: Reserve{SpendMicroUSD: 7}})
	if err != nil {
		t.Fatal(err)
	}
	lc, ok := claim(t, s, Claim{MaxClass: 3, TTL: time.Minute, ProjectCaps: map[string]int{"calc": 1}})
	if !ok || lc.ID != late.ID {
		t.Fatalf("late claim %v %v", lc.ID, ok)
	}
	lb, err := s.SetProjectBudget(ctx, "late", Caps{})
	if err != nil || lb.Reserved.SpendMicroUSD != 7 {
		t.Fatalf("late budget %+v, %v", lb, err)
	}
	if _, err := s.ReleaseTask(ctx, late.ID, lc.Claim.Token, true, "x"); err != nil {
		t.Fatal(err)
	}
	neg := int64(-1)
	if _, err := s.SetProjectBudget(ctx, "calc", Caps{MaxSpend: &neg}); code(err) != protocol.CodeInvalidField {
		t.Fatalf("negative cap: %v", err)
	}
	if _, err := s.SubmitTask(ctx, NewTask{Project: "calc", Submitter: "u", Spec: []byte(`{}`), Reserve: Reserve{WallMS: -5}}); code(err) != protocol.CodeInvalidField {
		t.Fatalf("negative reserve: %v", err)
	}
}

// TestBudgetActionSnoozeAndDismiss: a budget Action snoozes off the open
// list and is dismissed with feedback, both recorded in its task's
// ledger; dismissal grants nothing (the task stays held back).
func TestBudgetActionSnoozeAndDismiss(t *testing.T) {
	e := newEnv(t)
	s := e.store
	ctx := ctxT(t)
	spendCap := int64(10)
	if _, err := s.SetProjectBudget(ctx, "calc", Caps{MaxSpend: &spendCap}); err != nil {
		t.Fatal(err)
	}
	tk := submitReserving(t, s, 0, 20)
	if _, ok := claim(t, s, Claim{MaxClass: 3, TTL: time.Minute}); ok {
		t.Fatal("claimed over the budget")
	}
	open, err := s.Actions(ctx, uuid.Nil, false)
	if err != nil || len(open) != 1 {
		t.Fatalf("open %+v, %v", open, err)
	}
	a := open[0]
	if got, err := s.SnoozeAction(ctx, a.ID, time.Hour); err != nil || got.SnoozedUntil == nil {
		t.Fatalf("snooze %+v, %v", got, err)
	}
	if open, _ = s.Actions(ctx, uuid.Nil, false); len(open) != 0 {
		t.Fatalf("a snoozed action is open: %+v", open)
	}
	if all, _ := s.Actions(ctx, uuid.Nil, true); len(all) != 1 {
		t.Fatalf("all actions %+v", all)
	}
	if got, err := s.DismissAction(ctx, a.ID, "need_more_info"); err != nil || got.State != ActionDismissed {
		t.Fatalf("dismiss %+v, %v", got, err)
	}
	if _, err := s.DismissAction(ctx, a.ID, "need_more_info"); code(err) != protocol.CodeIllegalTransition {
		t.Fatalf("second dismissal: %v", err)
	}
	if got, _ := s.Task(ctx, tk.ID); got.State != TaskQueued || got.Blocked == "" || got.EmergencyGranted {
		t.Fatalf("a dismissal moved the task: %+v", got)
	}
	for _, kind := range []string{"action_opened", "action_snoozed", "action_dismissed"} {
		if n := count(t, s, tk.ID, kind); n != 1 {
			t.Fatalf("%d %s events in the task's ledger", n, kind)
		}
	}
	verifyTask(t, s, tk.ID)
}

// TestEgressReservation: a task reserves its episode's egress byte cap at
// admission against its project's; a claim that would pass the cap (less
// its emergency part) waits; a claim's end spends what the episode's proxy
// counted (egress_quota), never more than the reserve, and gives the rest
// back.
func TestEgressReservation(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	egressCap := int64(1000)
	if _, err := s.SetProjectBudget(ctx, "calc", Caps{MaxEgress: &egressCap, Emergency: Reserve{EgressBytes: 100}}); err != nil {
		t.Fatal(err)
	}
	submit := func(bytes int64) Task {
		tk, err := s.SubmitTask(ctx, NewTask{Project: "calc", MinClass: 3, Submitter: "uid:1000",
			Spec: []byte(`{"intent":"x"}`), Reserve: Reserve{WallMS: 60000, EgressBytes: bytes}})
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	a, b := submit(600), submit(600)
	cl := Claim{MaxClass: 3, TTL: time.Minute}
	if got, ok := claim(t, s, cl); !ok || got.ID != a.ID {
		t.Fatalf("first claim %v %v", got.ID, ok)
	}
	// 600 held; another 600 would pass 900 (1000 less the emergency 100).
	if got, ok := claim(t, s, cl); ok {
		t.Fatalf("claim went over the egress budget: %v", got.ID)
	}
	if bg := budgetOf(t, s); bg.Reserved.EgressBytes != 600 || bg.ExhaustedAt == nil {
		t.Fatalf("budget after the refusal: %+v", bg)
	}
	if n := count(t, s, b.ID, "task_budget_exhausted"); n != 1 {
		t.Fatalf("%d budget_exhausted events for b", n)
	}
	// a's proxy delivers 250 bytes; its episode ends: 600 given back, 250
	// spent, and b fits (250 + 600 <= 900).
	ep, err := s.CreateEpisode(ctx, NewEpisode{Spec: []byte(`{"intent":"a"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartTask(ctx, a.ID, 1, ep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveEgress(ctx, ep.ID, 250, 600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndEpisode(ctx, EndEpisode{EpisodeID: ep.ID, Epoch: 1, State: EpisodeCompleted, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SweepTasks(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Task(ctx, a.ID); got.Spent.EgressBytes != 250 || got.held {
		t.Fatalf("a after its end: spent %+v, held %v", got.Spent, got.held)
	}
	if bg := budgetOf(t, s); bg.Reserved.EgressBytes != 0 || bg.Spent.EgressBytes != 250 {
		t.Fatalf("budget after a settled: %+v", bg)
	}
	if got, ok := claim(t, s, cl); !ok || got.ID != b.ID {
		t.Fatalf("b after a settled: %v %v", got.ID, ok)
	}
	if bg := budgetOf(t, s); bg.Reserved.EgressBytes != 600 {
		t.Fatalf("budget with b claimed: %+v", bg)
	}
}

// TestResumedEpisodeSettlesOnce: a task whose host is lost is settled when
// the sweep requeues it (what its episode used so far is spent); a
// takeover that resumes the same episode reserves again, and its end
// spends only what the episode used after that — the relay's charge is
// cumulative, so spending it whole again would count the first part twice.
func TestResumedEpisodeSettlesOnce(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a := e.open("host-a", time.Second)
	b := e.open("host-b", time.Second)
	spendCap := int64(1000)
	if _, err := a.SetProjectBudget(ctx, "calc", Caps{MaxSpend: &spendCap}); err != nil {
		t.Fatal(err)
	}
	tk := submitReserving(t, a, 0, 100)
	got, ok := claim(t, a, Claim{MaxClass: 3})
	if !ok {
		t.Fatal("no claim")
	}
	ep, err := a.CreateEpisode(ctx, NewEpisode{Spec: []byte(`{"intent":"t"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.StartTask(ctx, tk.ID, got.Claim.Token, ep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetRelayBudget(ctx, ep.ID, 1000, 100); err != nil {
		t.Fatal(err)
	}
	charge := func(s *Postgres, n int64) {
		t.Helper()
		if _, _, err := s.ChargeRelay(ctx, ep.ID, RelayAmount{Spend: n, Tokens: n}, RelayAmount{Spend: n, Tokens: n}, false); err != nil {
			t.Fatal(err)
		}
	}
	charge(a, 10)
	// Host A is lost: its ownership lapses and B's sweep requeues the task.
	time.Sleep(1200 * time.Millisecond)
	if sw, err := b.SweepTasks(ctx, 0); err != nil || len(sw.Requeued) != 1 {
		t.Fatalf("sweep after A was lost: %+v, %v", sw, err)
	}
	if bg := budgetOf(t, b); bg.Spent.SpendMicroUSD != 10 || bg.Reserved.SpendMicroUSD != 0 {
		t.Fatalf("budget after the requeue: %+v", bg)
	}
	got, ok = claim(t, b, Claim{MaxClass: 3})
	if !ok || got.EpisodeID == nil || *got.EpisodeID != ep.ID {
		t.Fatalf("takeover claim %+v", got)
	}
	if _, err := b.AcquireOwnership(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	if got, err = b.StartTask(ctx, tk.ID, got.Claim.Token, ep.ID); err != nil || len(got.Episodes) != 1 {
		t.Fatalf("resumed start %+v, %v", got, err)
	}
	charge(b, 5) // the relay's charge is now 15 in all
	if _, err := b.EndEpisode(ctx, EndEpisode{EpisodeID: ep.ID, Epoch: 1, State: EpisodeCompleted, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SweepTasks(ctx, 0); err != nil {
		t.Fatal(err)
	}
	final, err := b.Task(ctx, tk.ID)
	if err != nil || final.State != TaskEnded || final.Spent.SpendMicroUSD != 15 || final.Spent.Tokens != 15 {
		t.Fatalf("task at its end: %s spent %+v, %v; want 15 spent", final.State, final.Spent, err)
	}
	if bg := budgetOf(t, b); bg.Spent.SpendMicroUSD != 15 || bg.Reserved != (Reserve{}) {
		t.Fatalf("budget at the end: %+v", bg)
	}
	verifyTask(t, b, tk.ID)
}
