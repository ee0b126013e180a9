package episode

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/store"
)

// TakeOver ends an episode whose kernel is gone — its ownership lease
// expired on another host — so that its task can run again here. It takes
// the ownership (refused while the owner renews), settles the effects past
// the commit horizon from their targets' evidence, and fences the epoch,
// so nothing the dead host launched can act. A harvest that had landed is
// the episode's end; otherwise it ends aborted with reason. The dead
// host's domain and workspace died with it: nothing here touches them.
//
// No repair is spent: the task's next episode starts whole from its base,
// and the task bounds how often that may happen (its takeovers).
func (k *Controller) TakeOver(ctx context.Context, id uuid.UUID, reason string) (store.EpisodeState, string, error) {
	st := k.cfg.Store
	if _, ok := k.Episode(id); ok {
		return "", "", fmt.Errorf("episode: %s runs on this kernel", id)
	}
	if _, err := st.AcquireOwnership(ctx, id); err != nil {
		return "", "", err
	}
	// Settle first: an adapter may have acted on an effect past the
	// horizon; only its target's evidence says whether it did.
	if _, err := k.cfg.Broker.Reconcile(ctx, id); err != nil {
		return "", "", fmt.Errorf("episode: reconcile: %w", err)
	}
	rec, err := st.Episode(ctx, id)
	if err != nil {
		return "", "", err
	}
	if rec.State != store.EpisodeActive {
		// Ended meanwhile (its own kernel came back and finished it):
		// its recorded end is the task's.
		return rec.State, k.endReason(ctx, id), nil
	}
	adv, err := st.AdvanceEpoch(ctx, store.AdvanceEpoch{EpisodeID: id, FromEpoch: rec.Epoch, Reason: "host lost: " + reason})
	if err != nil {
		return "", "", err
	}
	end := store.EndEpisode{EpisodeID: id, Epoch: adv.Lineage.ToEpoch, State: store.EpisodeAborted, Reason: "host lost: " + reason}
	var spec Spec
	if json.Unmarshal(rec.Spec, &spec) == nil {
		e := &Episode{k: k, id: id, spec: spec}
		o, ok, err := e.harvested(ctx)
		if err != nil {
			return "", "", err
		}
		if ok {
			o.Reason = "landed by the harvest before its host was lost; ended by the kernel that took its task over"
			end.State, end.Reason = o.state().storeState(), o.encode()
		}
	}
	if _, err := st.EndEpisode(ctx, end); err != nil {
		return "", "", err
	}
	k.log.Info("episode taken over from a lost host", "episode", id, "ended", string(end.State), "staled", len(adv.StaledEffects))
	return end.State, end.Reason, nil
}

// endReason is the reason the episode's ledger recorded for its end.
func (k *Controller) endReason(ctx context.Context, id uuid.UUID) string {
	evs, err := k.cfg.Store.Events(ctx, id)
	if err != nil {
		return ""
	}
	for i := len(evs) - 1; i >= 0; i-- {
		var b struct {
			Reason string `json:"reason"`
		}
		if evs[i].Kind == "episode_ended" && json.Unmarshal(evs[i].Body, &b) == nil {
			return b.Reason
		}
	}
	return ""
}
