package api

import (
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestTaskRoutes: the queue's reads and a budget Action through the API:
// a task its project's budget holds back is listed with its reserve and
// why; its Action shows the task and is answered by the operator (the
// grant recorded once, a second answer refused); cancel, events and
// budgets answer; bad input gets catalogue errors. Submission needs the
// episode controller (no controller: 501), which the kernel-level tests
// drive (TestThreeKernelsOneDatabase, TestRunSurvivesInterrupt).
func TestTaskRoutes(t *testing.T) {
	e := newEnv(t, Access{KernelUID: uint32(0), OperatorGID: -1})
	ctx := ctxT(t)
	if _, err := e.client.SubmitTask(ctx, TaskRequest{Project: "calc", Spec: []byte(`{"intent":"x"}`)}); err == nil {
		t.Fatal("a submission without an episode controller was accepted")
	}
	cap := int64(10)
	if _, err := e.store.SetProjectBudget(ctx, "calc", store.Caps{MaxSpend: &cap}); err != nil {
		t.Fatal(err)
	}
	tk, err := e.store.SubmitTask(ctx, store.NewTask{Project: "calc", MinClass: 3, Submitter: "uid:0", Spec: []byte(`{"intent":"x"}`),
		Reserve: store.Reserve{SpendMicroUSD: 20, WallMS: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.store.ClaimTask(ctx, store.Claim{MaxClass: 3, TTL: time.Minute}); ok || err != nil {
		t.Fatalf("claim over the budget: %v %v", ok, err)
	}
	list, err := e.client.Tasks(ctx, "queued", "calc", 10)
	if err != nil || len(list) != 1 || list[0].Blocked == "" || list[0].Reserve.SpendMicroUSD != 20 {
		t.Fatalf("tasks %+v, %v", list, err)
	}
	acts, err := e.client.Actions(ctx, "", false)
	if err != nil || len(acts) != 1 || acts[0].Task == nil || acts[0].Task.ID != tk.ID || acts[0].Command == "" {
		t.Fatalf("actions %+v, %v", acts, err)
	}
	if _, err := e.client.ResolveAction(ctx, "not-a-uuid", true); err == nil {
		t.Fatal("a malformed id was accepted")
	}
	a, err := e.client.ResolveAction(ctx, acts[0].ID, true)
	if err != nil || a.State != string(store.ActionApproved) || a.Task == nil || !a.Task.EmergencyGranted {
		t.Fatalf("approve: %+v, %v", a, err)
	}
	if _, err := e.client.ResolveAction(ctx, acts[0].ID, false); err == nil {
		t.Fatal("a second, different answer was accepted")
	} else {
		wantCode(t, err, protocol.CodeIllegalTransition)
	}
	l, err := e.client.TaskEvents(ctx, tk.ID.String())
	if err != nil || !l.Verified {
		t.Fatalf("task ledger: %+v, %v", l, err)
	}
	grants := 0
	for _, ev := range l.Events {
		if ev.Kind == "task_emergency_granted" {
			grants++
		}
	}
	if grants != 1 {
		t.Fatalf("%d grants in the ledger", grants)
	}
	if got, err := e.client.CancelTask(ctx, tk.ID.String()); err != nil || got.State != store.TaskCancelled {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	if bs, err := e.client.Budgets(ctx); err != nil || len(bs) != 1 || bs[0].Reserved != (store.Reserve{}) {
		t.Fatalf("budgets %+v, %v", bs, err)
	}
	if _, err := e.client.Tasks(ctx, "sleeping", "", 0); err == nil {
		t.Fatal("an unknown state was accepted")
	} else {
		wantCode(t, err, protocol.CodeInvalidField)
	}
	if _, err := e.client.Task(ctx, "01a2481a-1969-7acc-b399-5728e07b9621"); err == nil {
		t.Fatal("an unknown task was found")
	} else {
		wantCode(t, err, protocol.CodeNotFound)
	}
}
