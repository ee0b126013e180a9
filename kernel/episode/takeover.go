package episode

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/store"
)

// hostLost begins the lineage reason of a takeover's epoch advance: the
// one advance that is not a repair (repairsIn).
const hostLost = "host lost"

// TakeOver resumes here an episode whose kernel is gone — its ownership
// lease expired on another host. It takes the ownership (refused while
// the owner renews), settles the effects past the commit horizon from
// their targets' evidence, and fences the epoch, so nothing the dead host
// launched can act. Then, as a kernel restart does (resume), a harvest
// that had landed is the episode's end; otherwise the episode resumes on
// this host from the replica of its last stable checkpoint, in a new
// generation under its previous lease. No repair is spent. Where it
// cannot resume (no replica, no stable checkpoint, a spec that no longer
// validates), it ends aborted and its task runs again whole.
//
// It returns store.EpisodeActive when the episode runs here now, else the
// state and reason it ended with.
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
	out := Recovery{Contained: map[uuid.UUID]string{}, Ended: map[uuid.UUID]Outcome{}}
	e, why, err := k.resume(ctx, rec, &out, hostLost+": "+reason)
	switch {
	case err != nil:
		return "", "", err
	case e != nil:
		k.log.Info("episode taken over from a lost host: resumed from its last stable checkpoint", "episode", id, "epoch", e.Status().Epoch)
		return store.EpisodeActive, "resumed from its last stable checkpoint", nil
	case why == "":
		o := out.Ended[id]
		k.log.Info("episode taken over from a lost host: its harvest had landed", "episode", id)
		return o.state().storeState(), o.encode(), nil
	}
	k.log.Info("episode taken over from a lost host: it runs again whole", "episode", id, "why", why)
	return store.EpisodeAborted, why, nil
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
