package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// Action is a durable decision that waits for a human (store.Action): one
// exact operation — the effect, its revision, epoch and payload digest,
// kind and target, as they stood when it was opened — the episode and the
// effect as they stand now, and the command that approves it: a signature
// with the operator's decision key, which no surface of the kernel holds.
type Action struct {
	ID           string      `json:"id"`
	State        string      `json:"state"`
	Reason       string      `json:"reason"`
	Priority     int         `json:"priority"`
	Revision     int         `json:"revision"`
	Epoch        int64       `json:"epoch"`
	Digest       string      `json:"payload_digest"`
	SnoozedUntil *time.Time  `json:"snoozed_until,omitempty"`
	Feedback     string      `json:"feedback,omitempty"`
	CreatedAt    time.Time   `json:"created_at"`
	ResolvedAt   *time.Time  `json:"resolved_at,omitempty"`
	Episode      EpisodeView `json:"episode"`
	Effect       EffectView  `json:"effect"`
	// Task is the queued task a budget Action is about (Episode and
	// Effect are then empty): approving it lets the task draw on its
	// project's emergency reserve once, denying it cancels the task.
	Task    *TaskView `json:"task,omitempty"`
	Command string    `json:"command,omitempty"`
	// Evidence (action show only): the decisions recorded on the exact
	// revision the Action names — verification, the semantic bank's
	// readings and what the lease refused — beside Reason, the rule that
	// fired. A git_commit's diff is `autonomic episode patch`.
	Evidence []DecisionView `json:"evidence,omitempty"`
}

// ApproveCommand is the command that signs and records the approval of
// the Action with id.
func ApproveCommand(id string) string {
	return "autonomic action approve " + id + " --key ~/.config/autonomic/approval.pem --key-id YOUR_KEY_ID"
}

// ActionSource is what PendingActions reads (the API client).
type ActionSource interface {
	Actions(ctx context.Context, episodeID string, all bool) ([]Action, error)
}

// PendingActions are the open Actions (pending, not snoozed, their effect
// still at that revision), highest priority and oldest first, at most
// limit.
func PendingActions(ctx context.Context, src ActionSource, limit int) ([]Action, error) {
	out, err := src.Actions(ctx, "", false)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, err
}

// actionView is a's view, with its episode and effect as they stand.
func (s *Server) actionView(ctx context.Context, a store.Action) (Action, error) {
	v := Action{ID: a.ID.String(), State: string(a.State), Reason: a.Reason, Priority: a.Priority, Revision: a.Revision, Epoch: a.Epoch,
		Digest: a.PayloadDigest, SnoozedUntil: a.SnoozedUntil, Feedback: a.Feedback, CreatedAt: a.CreatedAt, ResolvedAt: a.ResolvedAt}
	if a.TaskID != nil {
		t, err := s.cfg.Store.Task(ctx, *a.TaskID)
		if err != nil {
			return Action{}, err
		}
		tv := taskView(t)
		v.Task = &tv
		if a.State == store.ActionPending {
			v.Command = "autonomic action approve " + v.ID
		}
		return v, nil
	}
	ep, err := s.cfg.Store.Episode(ctx, a.EpisodeID)
	if err != nil {
		return Action{}, err
	}
	f, err := s.cfg.Store.Effect(ctx, a.EffectID)
	if err != nil {
		return Action{}, err
	}
	v.Episode, v.Effect = episodeView(ep), effectView(f)
	if a.State == store.ActionPending {
		v.Command = ApproveCommand(v.ID)
	}
	return v, nil
}

// listActions: GET /v1/actions[?episode=ID][&all=1] — the open Actions,
// or every one.
func (s *Server) listActions(ctx context.Context, r *http.Request) (any, error) {
	ep := uuid.Nil
	if q := r.URL.Query().Get("episode"); q != "" {
		var err error
		if ep, err = uuid.Parse(q); err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidField, "episode is not a UUID")
		}
	}
	as, err := s.cfg.Store.Actions(ctx, ep, r.URL.Query().Get("all") == "1")
	if err != nil {
		return nil, err
	}
	out := []Action{}
	for _, a := range as {
		v, err := s.actionView(ctx, a)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// action: GET /v1/actions/{id}.
func (s *Server) action(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	a, err := s.cfg.Store.Action(ctx, id)
	if err != nil {
		return nil, err
	}
	v, err := s.actionView(ctx, a)
	if err != nil || a.TaskID != nil {
		return v, err
	}
	ds, err := s.cfg.Store.Decisions(ctx, a.EffectID)
	if err != nil {
		return nil, err
	}
	v.Evidence = []DecisionView{}
	for _, d := range ds {
		if d.Revision == a.Revision && d.Epoch == a.Epoch && d.Kind != store.DecisionHuman {
			v.Evidence = append(v.Evidence, decisionView(d))
		}
	}
	return v, nil
}

// SnoozeRequest is POST /v1/actions/{id}/snooze's body.
type SnoozeRequest struct {
	Seconds int64 `json:"seconds"`
}

// snoozeAction: POST /v1/actions/{id}/snooze.
func (s *Server) snoozeAction(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	var req SnoozeRequest
	if err := readBody(r, &req); err != nil {
		return nil, err
	}
	a, err := s.cfg.Store.SnoozeAction(ctx, id, time.Duration(req.Seconds)*time.Second)
	if err != nil {
		return nil, err
	}
	return s.actionView(ctx, a)
}

// DismissRequest is POST /v1/actions/{id}/dismiss's body: one of
// store.DismissalFeedback.
type DismissRequest struct {
	Feedback string `json:"feedback"`
}

// dismissAction: POST /v1/actions/{id}/dismiss.
func (s *Server) dismissAction(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	var req DismissRequest
	if err := readBody(r, &req); err != nil {
		return nil, err
	}
	a, err := s.cfg.Store.DismissAction(ctx, id, req.Feedback)
	if err != nil {
		return nil, err
	}
	return s.actionView(ctx, a)
}

// Actions lists the open Actions (all: every one), of one episode unless
// episodeID is "".
func (c *Client) Actions(ctx context.Context, episodeID string, all bool) ([]Action, error) {
	q := url.Values{}
	if episodeID != "" {
		q.Set("episode", episodeID)
	}
	if all {
		q.Set("all", "1")
	}
	var out []Action
	err := c.do(ctx, http.MethodGet, "/v1/actions", q, nil, &out)
	return out, err
}

// Action reads one Action.
func (c *Client) Action(ctx context.Context, id string) (Action, error) {
	var out Action
	err := c.do(ctx, http.MethodGet, "/v1/actions/"+url.PathEscape(strings.TrimSpace(id)), nil, nil, &out)
	return out, err
}

// SnoozeAction hides an open Action for d.
func (c *Client) SnoozeAction(ctx context.Context, id string, d time.Duration) (Action, error) {
	var out Action
	err := c.do(ctx, http.MethodPost, "/v1/actions/"+url.PathEscape(id)+"/snooze", nil, SnoozeRequest{Seconds: int64(d / time.Second)}, &out)
	return out, err
}

// DismissAction closes an open Action without an answer, with feedback.
func (c *Client) DismissAction(ctx context.Context, id, feedback string) (Action, error) {
	var out Action
	err := c.do(ctx, http.MethodPost, "/v1/actions/"+url.PathEscape(id)+"/dismiss", nil, DismissRequest{Feedback: feedback}, &out)
	return out, err
}

// ResolveRequest is POST /v1/actions/{id}/resolve's body: the answer to a
// budget Action ("allow" or "deny"). An effect's Action is answered by a
// signed approval (POST /v1/effects/{id}/approval) instead.
type ResolveRequest struct {
	Decision string `json:"decision"`
}

// resolveAction: POST /v1/actions/{id}/resolve, by the operator whose uid
// the peer check read.
func (s *Server) resolveAction(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	var req ResolveRequest
	if err := readBody(r, &req); err != nil {
		return nil, err
	}
	if req.Decision != store.VerdictAllow && req.Decision != store.VerdictDeny {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "decision is allow or deny")
	}
	a, err := s.cfg.Store.ResolveTaskAction(ctx, id, req.Decision == store.VerdictAllow, operatorName(ctx))
	if err != nil {
		return nil, err
	}
	if s.cfg.Queue != nil {
		s.cfg.Queue.Poke()
	}
	return s.actionView(ctx, a)
}

// ResolveAction answers a budget Action (allow or deny).
func (c *Client) ResolveAction(ctx context.Context, id string, allow bool) (Action, error) {
	d := store.VerdictDeny
	if allow {
		d = store.VerdictAllow
	}
	var out Action
	err := c.do(ctx, http.MethodPost, "/v1/actions/"+url.PathEscape(id)+"/resolve", nil, ResolveRequest{Decision: d}, &out)
	return out, err
}
