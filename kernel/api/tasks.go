package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// TaskRequest is POST /v1/tasks's body: an episode spec (as POST
// /v1/episodes takes it) for the queue, with its project, priority and
// the autonomy class it needs (a kernel claims it only when its autonomy
// allows that class, so its lease is not minted too narrow to land).
type TaskRequest struct {
	Project  string          `json:"project"`
	Priority int             `json:"priority"`
	MinClass int             `json:"min_class"`
	Spec     json.RawMessage `json:"spec,omitempty"`
}

// TaskView is a task as the API shows it: the store's record, with the
// outcome its last episode ended with when it ended by itself.
type TaskView struct {
	store.Task
	Ended *episode.Outcome `json:"episode_outcome,omitempty"`
}

func taskView(t store.Task) TaskView {
	v := TaskView{Task: t}
	if o, ok := episode.ParseOutcome(t.Reason); ok {
		v.Ended = &o
	}
	return v
}

// submitTask: POST /v1/tasks. The spec is checked as a start would check
// it (strictly; its policy signed by a key the kernel holds) before it is
// queued, so a task that could never start is refused now.
func (s *Server) submitTask(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Controller == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "tasks: no episode controller is wired into this kernel")
	}
	var req TaskRequest
	if err := readBody(r, &req); err != nil {
		return nil, err
	}
	if len(req.Spec) == 0 || string(req.Spec) == "null" {
		return nil, protocol.Errorf(protocol.CodeMissingField, "spec")
	}
	reserve, err := s.cfg.Controller.Check(ctx, req.Spec)
	if err != nil {
		return nil, err
	}
	who := "operator"
	if p := peerOf(ctx); p != nil {
		who = fmt.Sprintf("uid:%d", p.UID)
	}
	t, err := s.cfg.Store.SubmitTask(ctx, store.NewTask{Project: req.Project, Priority: req.Priority, MinClass: req.MinClass,
		Submitter: who, Spec: req.Spec, Reserve: reserve})
	if err != nil {
		return nil, err
	}
	if s.cfg.Queue != nil {
		s.cfg.Queue.Poke()
	}
	return taskView(t), nil
}

// listTasks: GET /v1/tasks[?state=S][&project=P][&limit=N], newest first.
func (s *Server) listTasks(ctx context.Context, r *http.Request) (any, error) {
	limit, err := queryInt(r, "limit", store.MaxList, store.MaxList)
	if err != nil {
		return nil, err
	}
	f := store.TaskFilter{State: store.TaskState(r.URL.Query().Get("state")), Project: r.URL.Query().Get("project"), Limit: int(limit)}
	switch f.State {
	case "", store.TaskQueued, store.TaskClaimed, store.TaskRunning, store.TaskEnded, store.TaskCancelled, store.TaskFailed:
	default:
		return nil, protocol.Errorf(protocol.CodeInvalidField, "state is not a task state")
	}
	ts, err := s.cfg.Store.Tasks(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]TaskView, len(ts))
	for i, t := range ts {
		out[i] = taskView(t)
	}
	return out, nil
}

// task: GET /v1/tasks/{id}.
func (s *Server) task(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	t, err := s.cfg.Store.Task(ctx, id)
	if err != nil {
		return nil, err
	}
	return taskView(t), nil
}

// cancelTask: POST /v1/tasks/{id}/cancel.
func (s *Server) cancelTask(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	if err := readBody(r, nil); err != nil {
		return nil, err
	}
	t, err := s.cfg.Store.CancelTask(ctx, id, operatorName(ctx))
	if err != nil {
		return nil, err
	}
	if s.cfg.Queue != nil {
		s.cfg.Queue.Poke()
	}
	return taskView(t), nil
}

// taskEvents: GET /v1/tasks/{id}/events — the task's ledger, verified.
func (s *Server) taskEvents(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	rep, err := s.cfg.Store.VerifyTaskLedger(ctx, id)
	if err != nil {
		return nil, err
	}
	es, err := s.cfg.Store.TaskEvents(ctx, id)
	if err != nil {
		return nil, err
	}
	v := TaskLedgerView{Verified: rep.OK(), Events: []EventView{}}
	if !rep.OK() {
		v.Broken = rep.Broken.Error()
	}
	for _, e := range es {
		v.Events = append(v.Events, eventView(e))
	}
	return v, nil
}

// TaskLedgerView is a task's ledger and whether its chain verifies.
type TaskLedgerView struct {
	Verified bool        `json:"verified"`
	Broken   string      `json:"broken,omitempty"`
	Events   []EventView `json:"events"`
}

// SubmitTask queues a task.
func (c *Client) SubmitTask(ctx context.Context, req TaskRequest) (TaskView, error) {
	var out TaskView
	err := c.do(ctx, http.MethodPost, "/v1/tasks", nil, req, &out)
	return out, err
}

// Tasks lists tasks, newest first (state and project "" for any).
func (c *Client) Tasks(ctx context.Context, state, project string, limit int) ([]TaskView, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	if project != "" {
		q.Set("project", project)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out []TaskView
	err := c.do(ctx, http.MethodGet, "/v1/tasks", q, nil, &out)
	return out, err
}

// Task reads one task.
func (c *Client) Task(ctx context.Context, id string) (TaskView, error) {
	var out TaskView
	err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}

// CancelTask cancels a task.
func (c *Client) CancelTask(ctx context.Context, id string) (TaskView, error) {
	var out TaskView
	err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+"/cancel", nil, struct{}{}, &out)
	return out, err
}

// TaskEvents reads a task's ledger.
func (c *Client) TaskEvents(ctx context.Context, id string) (TaskLedgerView, error) {
	var out TaskLedgerView
	err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id)+"/events", nil, nil, &out)
	return out, err
}

// WaitTask polls a task until it is final or ctx ends.
func (c *Client) WaitTask(ctx context.Context, id string, every time.Duration) (TaskView, error) {
	for {
		t, err := c.Task(ctx, id)
		if err == nil && t.State.Done() {
			return t, nil
		}
		if err != nil && !IsUnreachable(err) {
			return t, err
		}
		select {
		case <-ctx.Done():
			return t, context.Cause(ctx)
		case <-time.After(every):
		}
	}
}

// budgets: GET /v1/budgets — every project's caps, holds and spend.
func (s *Server) budgets(ctx context.Context, _ *http.Request) (any, error) {
	bs, err := s.cfg.Store.ProjectBudgets(ctx)
	if bs == nil {
		bs = []store.ProjectBudget{}
	}
	return bs, err
}

// Budgets lists every project's budget.
func (c *Client) Budgets(ctx context.Context) ([]store.ProjectBudget, error) {
	var out []store.ProjectBudget
	err := c.do(ctx, http.MethodGet, "/v1/budgets", nil, nil, &out)
	return out, err
}

// operatorName names the API peer in the ledger: its uid, which the peer
// check read from the socket.
func operatorName(ctx context.Context) string {
	if p := peerOf(ctx); p != nil {
		return fmt.Sprintf("operator uid %d", p.UID)
	}
	return "operator"
}
