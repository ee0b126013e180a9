package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// Version is the server's implementation version reported to clients.
const Version = "1"

// Tools are the names of every tool the server offers, in the order listed.
var Tools = []string{"episodes_list", "episode_show", "effects_list", "effect_show", "events_tail", "ledger_verify", "egress_list",
	"episode_start", "patch_show", "actions_list", "tasks_list", "task_show", "task_submit"}

// maxLimit bounds a list a caller asks for.
const maxLimit = 500

// API is what the tools read: the operator API client (api.Client).
type API interface {
	Episodes(ctx context.Context, limit int) ([]api.EpisodeView, error)
	Episode(ctx context.Context, id string) (api.EpisodeView, error)
	Effects(ctx context.Context, episodeID string) ([]api.EffectView, error)
	Effect(ctx context.Context, id string) (api.EffectView, error)
	Events(ctx context.Context, episodeID string, after int64, limit int) ([]api.EventView, error)
	Verify(ctx context.Context, episodeID string) (api.VerifyView, error)
	Egress(ctx context.Context, episodeID string) ([]api.EgressView, error)
	Start(ctx context.Context, spec json.RawMessage) (api.EpisodeView, error)
	Patch(ctx context.Context, effectID string) (api.PatchView, error)
	Actions(ctx context.Context, episodeID string, all bool) ([]api.Action, error)
	Tasks(ctx context.Context, state, project string, limit int) ([]api.TaskView, error)
	Task(ctx context.Context, id string) (api.TaskView, error)
	SubmitTask(ctx context.Context, req api.TaskRequest) (api.TaskView, error)
}

// SubmitIn queues a task.
type SubmitIn struct {
	Spec     map[string]any `json:"spec" jsonschema:"the episode spec (an object), its policy signed by an operator's key; the kernel verifies it"`
	Project  string         `json:"project,omitempty" jsonschema:"the task's project, whose caps and budget it counts against (default: default)"`
	Priority int            `json:"priority,omitempty" jsonschema:"higher runs first (-1000 to 1000)"`
	MinClass int            `json:"min_class,omitempty" jsonschema:"the autonomy class the task needs: a kernel claims it only when its autonomy allows it"`
}

// TasksIn lists tasks.
type TasksIn struct {
	State   string `json:"state,omitempty" jsonschema:"only tasks in this state (queued, claimed, running, ended, cancelled, failed)"`
	Project string `json:"project,omitempty" jsonschema:"only this project's tasks"`
	Limit   int    `json:"limit,omitempty" jsonschema:"how many, newest first (1 to 500; default 50)"`
}

// StartIn starts an episode.
type StartIn struct {
	Spec map[string]any `json:"spec" jsonschema:"the episode spec (an object), its policy signed by an operator's key (autonomic policy sign); the kernel verifies it"`
}

// ListIn is a list's input.
type ListIn struct {
	Limit int `json:"limit,omitempty" jsonschema:"how many, newest first (1 to 500; default 50)"`
}

// IDIn names one episode or effect.
type IDIn struct {
	ID string `json:"id" jsonschema:"the episode's or effect's id (a UUID)"`
}

// EpisodeIn names an episode.
type EpisodeIn struct {
	EpisodeID string `json:"episode_id" jsonschema:"the episode's id (a UUID)"`
}

// EventsIn reads an episode's ledger.
type EventsIn struct {
	EpisodeID string `json:"episode_id" jsonschema:"the episode's id (a UUID)"`
	After     *int64 `json:"after,omitempty" jsonschema:"only entries after this sequence number; absent: the last ones"`
	Limit     int    `json:"limit,omitempty" jsonschema:"how many entries (1 to 500; default 50)"`
}

// New is the MCP server over a.
func New(a API) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "autonomic", Version: Version}, &sdk.ServerOptions{
		Instructions: "Read-only view of an Autonomic kernel: episodes, their effects and decisions, their hash-chained ledgers and egress. " +
			"No tool approves or grants anything; approvals are signed by an operator with `autonomic effect approve`.",
	})
	sdk.AddTool(s, &sdk.Tool{Name: "episodes_list", Description: "The newest episodes with their state, epoch and owner."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in ListIn) (*sdk.CallToolResult, any, error) {
			n, err := limit(in.Limit)
			if err != nil {
				return nil, nil, err
			}
			v, err := a.Episodes(ctx, n)
			return wrap(map[string]any{"episodes": nonNil(v)}, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "episode_show", Description: "One episode: its stored state, live view and outcome."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in IDIn) (*sdk.CallToolResult, any, error) {
			if err := isID(in.ID); err != nil {
				return nil, nil, err
			}
			v, err := a.Episode(ctx, in.ID)
			return wrap(v, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "effects_list", Description: "An episode's effects: kind, class, state, target."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in EpisodeIn) (*sdk.CallToolResult, any, error) {
			if err := isID(in.EpisodeID); err != nil {
				return nil, nil, err
			}
			v, err := a.Effects(ctx, in.EpisodeID)
			return wrap(map[string]any{"effects": nonNil(v)}, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "effect_show", Description: "One effect with every decision on it (verification, sensor readings, approvals)."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in IDIn) (*sdk.CallToolResult, any, error) {
			if err := isID(in.ID); err != nil {
				return nil, nil, err
			}
			v, err := a.Effect(ctx, in.ID)
			return wrap(v, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "events_tail", Description: "An episode's ledger entries: the last ones, or those after a sequence number."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in EventsIn) (*sdk.CallToolResult, any, error) {
			if err := isID(in.EpisodeID); err != nil {
				return nil, nil, err
			}
			n, err := limit(in.Limit)
			if err != nil {
				return nil, nil, err
			}
			after := int64(-1)
			if in.After != nil {
				if *in.After < 0 {
					return nil, nil, invalid("after must not be negative")
				}
				after = *in.After
			}
			v, err := a.Events(ctx, in.EpisodeID, after, n)
			return wrap(map[string]any{"events": nonNil(v)}, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "ledger_verify", Description: "Verify an episode's hash-chained ledger from its first entry."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in EpisodeIn) (*sdk.CallToolResult, any, error) {
			if err := isID(in.EpisodeID); err != nil {
				return nil, nil, err
			}
			v, err := a.Verify(ctx, in.EpisodeID)
			return wrap(v, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "egress_list", Description: "An episode's egress fetch ledger: host, path, outcome, bytes."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in EpisodeIn) (*sdk.CallToolResult, any, error) {
			if err := isID(in.EpisodeID); err != nil {
				return nil, nil, err
			}
			v, err := a.Egress(ctx, in.EpisodeID)
			return wrap(map[string]any{"fetches": nonNil(v)}, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "episode_start", Description: "Start an episode from a spec whose policy an operator signed. " +
		"The tool grants nothing: the kernel admits only what the signed policy and its envelope allow, under the caller's API permissions."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in StartIn) (*sdk.CallToolResult, any, error) {
			if in.Spec == nil {
				return nil, nil, invalid("spec must be a JSON object")
			}
			raw, err := json.Marshal(in.Spec)
			if err != nil {
				return nil, nil, invalid("spec")
			}
			v, err := a.Start(ctx, raw)
			return wrap(v, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "patch_show", Description: "A git_commit effect's stored patch (landed, denied or ref-moved), as git applies it."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in IDIn) (*sdk.CallToolResult, any, error) {
			if err := isID(in.ID); err != nil {
				return nil, nil, err
			}
			v, err := a.Patch(ctx, in.ID)
			if err != nil {
				return wrap(nil, err)
			}
			b, err := base64.StdEncoding.DecodeString(v.PatchB64)
			if err != nil {
				return nil, nil, invalid("the stored patch is not base64")
			}
			return wrap(map[string]any{"effect_id": v.EffectID, "state": v.State, "patch": string(b)}, nil)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "actions_list", Description: "Decisions waiting for a human: class 4 effects at the horizon (and, where escalated, effects outside their lease), each one exact operation " +
		"(effect, revision, epoch, payload digest, kind, target) with the command an operator runs to sign its approval. No tool approves."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in ListIn) (*sdk.CallToolResult, any, error) {
			n, err := limit(in.Limit)
			if err != nil {
				return nil, nil, err
			}
			v, err := api.PendingActions(ctx, a, n)
			return wrap(map[string]any{"actions": nonNil(v)}, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "tasks_list", Description: "The queue's tasks, newest first: state, project, priority, the episodes they ran, what they reserve and spent, why one is held back."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in TasksIn) (*sdk.CallToolResult, any, error) {
			n, err := limit(in.Limit)
			if err != nil {
				return nil, nil, err
			}
			v, err := a.Tasks(ctx, in.State, in.Project, n)
			return wrap(map[string]any{"tasks": nonNil(v)}, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "task_show", Description: "One task: its state, claim, episodes and, once ended, its outcome."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in IDIn) (*sdk.CallToolResult, any, error) {
			if err := isID(in.ID); err != nil {
				return nil, nil, err
			}
			v, err := a.Task(ctx, in.ID)
			return wrap(v, err)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "task_submit", Description: "Queue a task: an episode spec whose policy an operator signed. Any kernel of the database " +
		"with a free slot runs it, another takes it over if that kernel is lost. The tool grants nothing: the kernel admits only what the signed policy allows."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in SubmitIn) (*sdk.CallToolResult, any, error) {
			if in.Spec == nil {
				return nil, nil, invalid("spec must be a JSON object")
			}
			raw, err := json.Marshal(in.Spec)
			if err != nil {
				return nil, nil, invalid("spec")
			}
			if in.Project == "" {
				in.Project = "default"
			}
			v, err := a.SubmitTask(ctx, api.TaskRequest{Project: in.Project, Priority: in.Priority, MinClass: in.MinClass, Spec: raw})
			return wrap(v, err)
		})
	return s
}

// Error is a tool's failure: a catalogue code and its message.
type Error struct {
	Code    protocol.Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

func invalid(msg string) error {
	return &Error{Code: protocol.CodeInvalidField, Message: msg}
}

// wrap turns an API answer into a tool answer; an API error keeps only its
// catalogue code and message (AsWire), never the local cause.
func wrap(v any, err error) (*sdk.CallToolResult, any, error) {
	if err != nil {
		var te *Error
		if errors.As(err, &te) {
			return nil, nil, te
		}
		w := protocol.AsWire(err)
		return nil, nil, &Error{Code: w.Code, Message: w.Message}
	}
	return nil, v, nil
}

func isID(s string) error {
	if _, err := uuid.Parse(s); err != nil || len(s) != 36 {
		return invalid("id must be a UUID in its canonical 36-character form")
	}
	return nil
}

func limit(n int) (int, error) {
	switch {
	case n == 0:
		return 50, nil
	case n < 1 || n > maxLimit:
		return 0, invalid(fmt.Sprintf("limit must be 1 to %d", maxLimit))
	}
	return n, nil
}

// nonNil makes an empty list a JSON [] rather than null.
func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}
