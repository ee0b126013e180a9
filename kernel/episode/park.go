package episode

import (
	"context"
	"time"

	"github.com/autonomic-kernel/autonomic/store"
)

// parkPoll is how often a parked episode reads its Action's state.
const parkPoll = time.Second

// Park parks the episode that proposed e while e's Action waits on a
// human (it is broker.Config.AwaitingHuman); an episode this controller
// does not drive is left alone.
func (k *Controller) Park(e store.Effect) {
	if ep, ok := k.Episode(e.EpisodeID); ok {
		ep.park(e)
	}
}

// park freezes the episode's domain while eff's Action waits: its worker
// has nothing to do but wait for the answer, so it spends no CPU and no
// broker requests polling for it. The domain is thawed once the Action is
// answered, dismissed or superseded — read from the store, so an answer
// given through any kernel counts — and the park ends with its generation
// (a repair or the episode's end destroys the frozen domain) or at once
// when the episode is no longer running. The episode's wall time runs on.
func (e *Episode) park(eff store.Effect) {
	e.mu.Lock()
	if e.parked || e.state != Running || eff.Epoch != e.epoch {
		e.mu.Unlock()
		return
	}
	e.parked = true
	gen, done := e.gen, e.done
	e.mu.Unlock()
	id := e.k.launcherID(e.id, gen)
	unpark := func() { e.setParked(false) }
	ctx := context.Background()
	if _, err := e.k.cfg.Domains.Freeze(ctx, id); err != nil {
		e.log.Warn("could not park the episode while its Action waits", "effect", eff.ID, "error", err)
		unpark()
		return
	}
	e.log.Info("parked: the domain is frozen while its Action waits on a human", "effect", eff.ID, "revision", eff.Revision)
	go func() {
		defer unpark()
		t := time.NewTicker(parkPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			e.mu.Lock()
			same := e.gen == gen && e.state == Running
			e.mu.Unlock()
			if !same {
				return // its generation is gone, and the frozen domain with it
			}
			a, err := e.k.cfg.Store.ActionFor(ctx, eff.ID, eff.Revision, eff.Epoch)
			if err == nil && a.State == store.ActionPending {
				continue
			}
			if _, err := e.k.cfg.Domains.Thaw(ctx, id); err != nil {
				e.log.Warn("could not resume the parked episode", "effect", eff.ID, "error", err)
				return
			}
			e.log.Info("resumed: its Action was answered", "effect", eff.ID, "action_state", a.State)
			return
		}
	}()
}

// setParked records whether the episode waits, parked, on an Action
// (Status.Parked).
func (e *Episode) setParked(p bool) {
	e.mu.Lock()
	e.parked = p
	e.mu.Unlock()
}

// wallDeadline is when the episode's wall time ends; ok is false when it
// has none.
func (e *Episode) wallDeadline() (t time.Time, ok bool) {
	w := e.k.wallTime(e.spec)
	return e.started.Add(w), w > 0
}
