package api

import "context"

// Action is a decision that waits for a human: one exact operation (the
// effect, its revision, epoch and payload digest, kind and target) and
// the command that approves it — a signature with the operator's decision
// key, which no surface of the kernel holds.
type Action struct {
	Episode EpisodeView `json:"episode"`
	Effect  EffectView  `json:"effect"`
	Command string      `json:"command"`
}

// AwaitsApproval: a class 4 effect evaluated up to the human horizon.
func AwaitsApproval(f EffectView) bool { return f.Class == 4 && f.State == "evaluating" }

// ApproveCommand is the command that signs and records f's approval.
func ApproveCommand(f EffectView) string {
	return "autonomic effect approve " + f.ID + " --key ~/.config/autonomic/approval.pem --key-id YOUR_KEY_ID"
}

// ActionSource is what PendingActions reads (the API client).
type ActionSource interface {
	Episodes(ctx context.Context, limit int) ([]EpisodeView, error)
	Effects(ctx context.Context, episodeID string) ([]EffectView, error)
}

// PendingActions are the Actions of the newest limit episodes that are
// active, oldest effect first within each.
func PendingActions(ctx context.Context, src ActionSource, limit int) ([]Action, error) {
	eps, err := src.Episodes(ctx, limit)
	if err != nil {
		return nil, err
	}
	var out []Action
	for _, e := range eps {
		if e.State != "active" {
			continue
		}
		effs, err := src.Effects(ctx, e.ID)
		if err != nil {
			return nil, err
		}
		for _, f := range effs {
			if AwaitsApproval(f) {
				out = append(out, Action{Episode: e, Effect: f, Command: ApproveCommand(f)})
			}
		}
	}
	return out, nil
}
