package episode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// Recovery is what kernel start did.
type Recovery struct {
	// Settled are the effects reconciliation settled, by id.
	Settled []uuid.UUID
	// Destroyed are the launcher domains proven gone (fenced generations
	// and leftover verification domains).
	Destroyed []string
	Resumed   []*Episode
	// Contained maps an episode to why it could not resume.
	Contained map[uuid.UUID]string
	// Ended maps an episode whose harvest had landed before the restart
	// (only its end was not recorded) to the outcome it ended with.
	Ended map[uuid.UUID]Outcome
	// Skipped maps an episode this instance could not take (another live
	// kernel owns it) to why.
	Skipped map[uuid.UUID]string
}

// Recover is kernel start (issue 6 §2): reconcile every unsettled effect,
// then for each active episode fence its epoch, destroy every generation
// the previous kernel launched and prove it gone, and resume it from its
// last stable checkpoint into a new generation under a narrower lease (a
// generation 1 whose base was not yet recorded: from its workspace, which
// is the base's tree) — or contain it when it cannot resume. A restart is
// a repair: it advances the epoch, is recorded in the lineage and counts
// toward max_repairs, so a crash loop ends contained.
func (k *Controller) Recover(ctx context.Context) (Recovery, error) {
	rec := Recovery{Contained: map[uuid.UUID]string{}, Skipped: map[uuid.UUID]string{}, Ended: map[uuid.UUID]Outcome{}}
	// Effects past the commit horizon first: an adapter may have acted on
	// them, and only their target's evidence settles them. A failure here
	// stops recovery: resuming before settling could do an effect twice.
	settled, err := k.cfg.Broker.Reconcile(ctx, uuid.Nil)
	for _, s := range settled {
		rec.Settled = append(rec.Settled, s.EffectID)
	}
	if err != nil {
		return rec, fmt.Errorf("episode: reconcile: %w", err)
	}
	// Verification domains die with the kernel that ran them; their ids
	// are not in the store, but their workspaces name them.
	if err := k.destroyVerifications(ctx, &rec); err != nil {
		return rec, err
	}
	// An episode this host ran that ended elsewhere (its task taken over
	// while this kernel was gone) left its domains and workspace here.
	if err := k.destroyEnded(ctx, &rec); err != nil {
		return rec, err
	}
	eps, err := k.cfg.Store.ActiveEpisodes(ctx)
	if err != nil {
		return rec, err
	}
	var errs []error
	for _, ep := range eps {
		if _, ok := k.Episode(ep.ID); ok {
			continue
		}
		// Another host's task is the queue's to take over (TakeOver, once
		// the sweep sees that host gone): a kernel restart would resume it
		// as this host's own, and find no workspace.
		if ep.Owner.InstanceID != k.cfg.Store.Instance() {
			if _, isTask, err := k.cfg.Store.TaskForEpisode(ctx, ep.ID); err != nil || isTask {
				rec.Skipped[ep.ID] = "another host's task: the queue takes it over"
				continue
			}
		}
		if _, err := k.cfg.Store.AcquireOwnership(ctx, ep.ID); err != nil {
			rec.Skipped[ep.ID] = err.Error()
			continue
		}
		e, why, err := k.resume(ctx, ep, &rec, "")
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("episode %s: %w", ep.ID, err))
		case e != nil:
			rec.Resumed = append(rec.Resumed, e)
		case why == "":
			// Ended with its harvest's outcome (rec.Ended).
		default:
			rec.Contained[ep.ID] = why
		}
	}
	return rec, errors.Join(errs...)
}

func (k *Controller) destroyVerifications(ctx context.Context, rec *Recovery) error {
	ents, err := os.ReadDir(k.cfg.WorkspacesRoot)
	if err != nil {
		return err
	}
	probe := &Episode{k: k}
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name(), "verify-") {
			continue
		}
		if err := probe.destroy(ctx, ent.Name()); err != nil {
			return err
		}
		rec.Destroyed = append(rec.Destroyed, ent.Name())
		if err := workspace.Remove(k.cfg.WorkspacesRoot, ent.Name()); err != nil {
			return err
		}
	}
	return nil
}

// destroyEnded destroys the domains and removes the workspace of every
// episode whose workspace is on this host but which is no longer active
// in the store: a kernel that ended it here would have removed them, so
// another kernel ended it (a takeover) while this one was gone.
func (k *Controller) destroyEnded(ctx context.Context, rec *Recovery) error {
	ents, err := os.ReadDir(k.cfg.WorkspacesRoot)
	if err != nil {
		return err
	}
	probe := &Episode{k: k}
	for _, ent := range ents {
		id, err := uuid.Parse(ent.Name())
		if err != nil || id.String() != ent.Name() {
			continue
		}
		ep, err := k.cfg.Store.Episode(ctx, id)
		if err != nil || ep.State == store.EpisodeActive {
			continue // unknown to this database, or resumed below
		}
		gens, err := k.cfg.Store.Generations(ctx, id)
		if err != nil {
			return err
		}
		var ids []string
		for _, g := range gens {
			ids = append(ids, k.baseLauncherID(id, g.Generation), k.launcherID(id, g.Generation))
		}
		for _, d := range ids {
			if err := probe.destroy(ctx, d); err != nil {
				return err
			}
			rec.Destroyed = append(rec.Destroyed, d)
		}
		if err := workspace.Remove(k.cfg.WorkspacesRoot, ent.Name()); err != nil {
			return err
		}
		k.log.Info("destroyed what an episode ended elsewhere left on this host", "episode", id, "state", string(ep.State))
	}
	return nil
}

// resume fences one episode, proves its generations gone and restores it;
// it returns the running episode, or nil and why it was contained (an
// empty why: it ended with its harvest's outcome, recorded in out.Ended).
//
// lost, when not empty, is a takeover's reason: the episode's host was
// lost and this kernel, another host, resumes it from the replica of its
// last stable checkpoint (its workspace prepared here again at the base
// OID). That is no repair: its lease is the previous one (under the
// ceiling), max_repairs is not spent, and where it cannot resume it ends
// aborted with lost as its reason rather than contained, so its task runs
// again whole.
func (k *Controller) resume(ctx context.Context, rec store.Episode, out *Recovery, lost string) (*Episode, string, error) {
	st := k.cfg.Store
	var spec Spec
	specErr := json.Unmarshal(rec.Spec, &spec)
	e := k.newEpisode(rec.ID, spec)
	// A recovered episode starts where its authority died with the
	// previous kernel: suspended, with its domain not yet proven gone
	// (the table's pending → suspended move).
	e.epoch, e.started = rec.Epoch, rec.CreatedAt
	e.taken = k.recordedCheckpoints(ctx, rec.ID)
	if err := e.move(Suspended); err != nil {
		k.forget(rec.ID)
		return nil, "", err
	}
	lineage, err := st.Lineage(ctx, rec.ID)
	if err != nil {
		k.forget(rec.ID)
		return nil, "", err
	}
	ckpt, ckptErr := st.LatestStableCheckpoint(ctx, rec.ID)
	var ckptID *uuid.UUID
	if ckptErr == nil {
		ckptID = &ckpt.ID
	}
	// Fence first: every lease of the dead kernel is revoked and every
	// effect before the horizon staled, so nothing it launched can act
	// even before it is destroyed.
	fence := "kernel restart"
	if lost != "" {
		fence = lost
	}
	adv, err := st.AdvanceEpoch(ctx, store.AdvanceEpoch{EpisodeID: rec.ID, FromEpoch: rec.Epoch, Reason: fence,
		CheckpointID: ckptID})
	if err != nil {
		k.forget(rec.ID)
		return nil, "", err
	}
	e.epoch = adv.Lineage.ToEpoch
	gens, err := st.Generations(ctx, rec.ID)
	if err != nil {
		k.forget(rec.ID)
		return nil, "", err
	}
	var live *store.Generation
	for i, g := range gens {
		// A kernel that died while making a generation's base checkpoint
		// left that domain behind (destroying an absent one touches
		// nothing).
		for _, id := range []string{k.baseLauncherID(rec.ID, g.Generation), k.launcherID(rec.ID, g.Generation)} {
			if err := e.destroy(ctx, id); err != nil {
				k.forget(rec.ID)
				return nil, "", err
			}
			out.Destroyed = append(out.Destroyed, id)
		}
		if g.State == store.GenerationLive {
			if _, err := st.DestroyGeneration(ctx, g.DomainID, g.Generation); err != nil {
				k.forget(rec.ID)
				return nil, "", err
			}
		}
		live = &gens[i]
	}

	// contain ends the episode, its reason after the fence's: contained at
	// a kernel restart, aborted at a takeover (its task runs again whole).
	contain := func(why string) (*Episode, string, error) {
		why = fence + ": " + why
		end := store.EndEpisode{EpisodeID: rec.ID, Epoch: e.epoch, State: store.EpisodeContained, Reason: why}
		if lost != "" {
			end.State = store.EpisodeAborted
		}
		if _, err := st.EndEpisode(ctx, end); err != nil {
			k.forget(rec.ID)
			return nil, "", err
		}
		e.releaseCheckpoints()
		e.mu.Lock()
		err := e.moveLocked(Contained, why) // suspended → contained
		e.mu.Unlock()
		k.forget(rec.ID)
		if err != nil {
			return nil, "", err
		}
		e.log.Warn("contained at kernel start", "why", why)
		return nil, why, nil
	}
	// A harvest that landed before the kernel died, or before a store
	// outage kept its end from being recorded, is the episode's end: its
	// worker is not run again, its change not proposed again.
	if specErr == nil {
		o, ok, err := e.harvested(ctx)
		if err != nil {
			k.forget(rec.ID)
			return nil, "", err
		}
		if ok {
			if lost != "" {
				o.Reason = "landed by the harvest before its host was lost; ended by the kernel that took its task over"
			}
			why := o.encode()
			if _, err := st.EndEpisode(ctx, store.EndEpisode{EpisodeID: rec.ID, Epoch: e.epoch, State: o.state().storeState(), Reason: why}); err != nil {
				k.forget(rec.ID)
				return nil, "", err
			}
			// Its host objects go as a finished episode's do.
			e.mu.Lock()
			e.workspace = true
			e.mu.Unlock()
			e.cleanupStart()
			e.releaseCheckpoints()
			out.Ended[rec.ID] = o
			e.log.Info("ended at kernel start: its harvest had landed", "outcome", string(o.Kind), "effect", o.Effect)
			return nil, "", nil
		}
	}
	_, _, narrow, verr := spec.validate(k.policyKeys())
	switch {
	case specErr != nil || verr != nil:
		return contain("the recorded spec does not validate")
	case live == nil:
		return contain("the episode had no domain (interrupted start)")
	case repairsIn(lineage) >= spec.MaxRepairs && lost == "":
		return contain(fmt.Sprintf("max_repairs (%d) exhausted", spec.MaxRepairs))
	case !k.feat.Checkpoints:
		return contain(noCheckpoints(k.feat))
	case ckptErr != nil && live.Generation != 1:
		return contain("no stable checkpoint to resume from")
	}
	// Generation 1 before its base checkpoint was recorded holds what the
	// base would: its workspace's tree. It resumes from that, and its base
	// is taken again (the snapshot rule).
	pristine := ckptErr != nil
	if lost != "" && !pristine && k.cfg.Replicas == nil {
		return contain("this kernel keeps no checkpoint replicas")
	}
	if lost != "" {
		// The lost host's workspace died with it; the base OID's tree is
		// the lower layer here too.
		if _, err := workspace.Prepare(ctx, workspace.Clone{Repo: spec.Repo, BaseOID: spec.BaseOID, Root: k.cfg.WorkspacesRoot,
			ID: rec.ID.String(), UID: k.cfg.OwnerUID, GID: k.cfg.OwnerGID, Git: k.cfg.Git}); err != nil {
			return contain("the workspace cannot be prepared: " + err.Error())
		}
		e.mu.Lock()
		e.workspace = true
		e.mu.Unlock()
	}
	if fi, err := os.Stat(filepath.Join(k.cfg.WorkspacesRoot, rec.ID.String())); err != nil || !fi.IsDir() {
		return contain("the episode's workspace is gone")
	}
	digest, from := "", (*uuid.UUID)(nil)
	if !pristine {
		if digest, err = e.checkpointDigest(ckpt); err != nil {
			return contain(err.Error())
		}
		from = &ckpt.ID
		if lost != "" {
			if err := k.importReplica(ctx, k.launcherID(rec.ID, ckpt.Generation), digest); err != nil {
				return contain("no replica of the last stable checkpoint: " + err.Error())
			}
		}
	}
	prev, err := k.lastLease(ctx, rec.ID)
	if err != nil {
		return contain("the previous lease cannot be read")
	}
	g, err := st.NewGeneration(ctx, store.NewGeneration{DomainID: live.DomainID, Epoch: e.epoch, CheckpointID: from})
	if err != nil {
		k.forget(rec.ID)
		return nil, "", err
	}
	lease, repairs := authority.Intersect(prev, narrow), repairsIn(lineage)+1
	if lost != "" {
		lease, repairs = prev, repairsIn(lineage)
	}
	if err := e.grant(ctx, lease.Narrow(k.ceiling())); err != nil {
		k.forget(rec.ID)
		return nil, "", err
	}
	e.mu.Lock()
	e.domainID, e.gen, e.repairs, e.workspace = live.DomainID, g.Generation, repairs, true
	e.mu.Unlock()
	if err := e.move(Repairing); err != nil {
		k.forget(rec.ID)
		return nil, "", err
	}
	if err := e.run(ctx, digest); err != nil {
		// The supervisor destroyed whatever it created; the episode stays
		// active and fenced for the next start.
		k.forget(rec.ID)
		return nil, "", err
	}
	e.log.Info("resumed", "fence", fence, "epoch", e.epoch, "generation", g.Generation, "staled", len(adv.StaledEffects))
	return e, "", nil
}

// repairsIn counts the repairs in an episode's lineage: every epoch
// advance but a takeover's (its host was lost; the episode did nothing).
func repairsIn(lineage []store.Lineage) int {
	n := 0
	for _, l := range lineage {
		if !strings.HasPrefix(l.Reason, hostLost) {
			n++
		}
	}
	return n
}

// lastLease reads the episode's most recently granted lease from its
// ledger: a resumed episode's lease is never wider than it.
func (k *Controller) lastLease(ctx context.Context, id uuid.UUID) (authority.Capability, error) {
	evs, err := k.cfg.Store.Events(ctx, id)
	if err != nil {
		return authority.Capability{}, err
	}
	var last uuid.UUID
	for _, ev := range evs {
		if ev.Kind != "lease_granted" {
			continue
		}
		var b struct {
			LeaseID uuid.UUID `json:"lease_id"`
		}
		if json.Unmarshal(ev.Body, &b) == nil {
			last = b.LeaseID
		}
	}
	if last == uuid.Nil {
		return authority.Capability{}, errors.New("no lease granted")
	}
	l, err := k.cfg.Store.Lease(ctx, last)
	if err != nil {
		return authority.Capability{}, err
	}
	return decodeLease(l.Capabilities)
}

// recordedCheckpoints are the archives the store's ledger says the episode
// took (checkpoint_recorded), each with the launcher domains that may hold
// it: a kernel that restarted knows the earlier ones from there alone. A
// generation 1 archive may be the base's; releasing it for a domain that
// does not hold it leaves it to the one that does.
func (k *Controller) recordedCheckpoints(ctx context.Context, ep uuid.UUID) []heldCheckpoint {
	evs, err := k.cfg.Store.Events(ctx, ep)
	if err != nil {
		return nil
	}
	var out []heldCheckpoint
	for _, ev := range evs {
		var b struct {
			Digest     string `json:"digest"`
			Generation int    `json:"generation"`
		}
		if ev.Kind != "checkpoint_recorded" || json.Unmarshal(ev.Body, &b) != nil {
			continue
		}
		hex, ok := strings.CutPrefix(b.Digest, "sha256:")
		if !ok || !protocol.ValidDigest(hex) {
			continue
		}
		// Taken of the generation's domain or of its base's: a hold that
		// is not there releases nothing.
		out = append(out, heldCheckpoint{k.launcherID(ep, b.Generation), hex}, heldCheckpoint{k.baseLauncherID(ep, b.Generation), hex})
	}
	return out
}
