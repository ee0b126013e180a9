package episode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// The harvest (issue 13 §4): when the worker of an episode whose spec asks
// for it exits, the controller checkpoints the domain, reads the change
// from that digest-verified archive (kernel/workspace.Harvest) and
// proposes it as a git_commit through the broker's own dispatch —
// prepare, evaluate, commit, exactly as a worker's request over the
// socket — under the episode's current epoch and lease. The episode then
// ends by itself with an Outcome.

// OutcomeKind is how an episode ended by itself.
type OutcomeKind string

const (
	// OutcomeLanded: the change is committed on the ref (Ref, Commit,
	// Effect); Reason says when the worker committed it itself.
	OutcomeLanded OutcomeKind = "landed"
	// OutcomeDenied: the change was refused — by the harvest's rules, the
	// lease, policy, verification or the adapter (Code, Reason, and
	// Effect when it was proposed).
	OutcomeDenied OutcomeKind = "denied"
	// OutcomeNothing: the workspace has no change against the base.
	OutcomeNothing OutcomeKind = "nothing_to_commit"
	// OutcomeWallTime: the episode's wall time ran out; its domain was
	// destroyed and nothing was harvested.
	OutcomeWallTime OutcomeKind = "wall_time"
	// OutcomeFailed: the harvest could not be made (a kernel-side error:
	// no checkpoint, an unreadable archive, an unknown commit outcome).
	OutcomeFailed OutcomeKind = "harvest_failed"
)

// Outcome is the recorded end of an episode that ended by itself. It is
// the reason of the store's episode_ended event (JSON, at most 256
// bytes: the store's text cap) — ParseOutcome reads it back — and
// Status.Outcome while the controller remembers the episode.
type Outcome struct {
	Kind   OutcomeKind `json:"outcome"`
	Ref    string      `json:"ref,omitempty"`
	Commit string      `json:"commit,omitempty"`
	Effect string      `json:"effect,omitempty"`
	Code   string      `json:"code,omitempty"`
	Reason string      `json:"reason,omitempty"`
	// Ignored counts what the repository's ignore rules left out of the
	// harvest (node_modules, __pycache__, build output), with the first
	// few names as a sample: the ledger's record of what was not taken.
	Ignored       int      `json:"ignored,omitempty"`
	IgnoredSample []string `json:"ignored_sample,omitempty"`
}

// maxReason is the store's cap on an episode_ended reason.
const maxReason = 256

// encode is the Outcome as the store records it: the ignored sample is
// shortened, then the reason cut (on a rune boundary), until the document
// fits.
func (o Outcome) encode() string {
	o.IgnoredSample = slices.Clone(o.IgnoredSample)
	for {
		b, _ := json.Marshal(o)
		switch {
		case len(b) <= maxReason:
			return string(b)
		case len(o.IgnoredSample) > 0:
			o.IgnoredSample = o.IgnoredSample[:len(o.IgnoredSample)-1]
		case o.Reason != "":
			r := []rune(o.Reason)
			o.Reason = string(r[:len(r)*3/4])
		case o.Ignored != 0:
			o.Ignored = 0 // the commit and effect come first
		default:
			return string(b)
		}
	}
}

// ParseOutcome reads an Outcome from an episode_ended event's reason; ok
// is false for an episode that did not end by itself (an operator's
// reason, a containment).
func ParseOutcome(reason string) (Outcome, bool) {
	var o Outcome
	if !strings.HasPrefix(reason, `{"outcome":`) || json.Unmarshal([]byte(reason), &o) != nil || o.Kind == "" {
		return Outcome{}, false
	}
	return o, true
}

// state is the lifecycle state an outcome ends the episode in.
func (o Outcome) state() State {
	switch o.Kind {
	case OutcomeLanded, OutcomeDenied, OutcomeNothing:
		return Completed
	}
	return Aborted
}

// Archives opens a stored checkpoint archive by its SHA-256 (hex). The
// harvest hashes every byte it reads against the digest the launcher
// returned, so a source need only be bounded, not trusted
// (workspace.ArchiveDir reads the launcher's checkpoint store).
type Archives interface {
	OpenArchive(ctx context.Context, digest string) (io.ReadCloser, error)
}

// errFinished ends the domain child of an episode that ended by itself.
var errFinished = errors.New("episode: finished")

// finish destroys the current domain, then ends the episode in the store
// with the outcome as its reason. The episode's state becomes final only
// once the store says it ended: when the store cannot be told (after
// endRetries), the episode stays active there and suspended here, and the
// next kernel start settles it (recover.go, harvested) — it never holds a
// final state the store does not.
func (e *Episode) finish(ctx context.Context, o Outcome) error {
	e.cgroup.Store(nil)
	e.mu.Lock()
	gen, epoch := e.gen, e.epoch
	e.mu.Unlock()
	if err := e.destroy(context.WithoutCancel(ctx), e.k.launcherID(e.id, gen)); err != nil {
		return err
	}
	to := o.state()
	e.mu.Lock()
	err := transition(e.state, to)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	why := o.encode()
	if err := e.recordEnd(func() error {
		return endInStore(context.WithoutCancel(ctx), e.k.cfg.Store, store.EndEpisode{EpisodeID: e.id, Epoch: epoch,
			State: to.storeState(), Reason: why})
	}); err != nil {
		e.log.Error("the episode ended by itself but the store could not record it; the next kernel start settles it",
			"outcome", string(o.Kind), "error", err)
		return fmt.Errorf("episode: recording the end (%s): %w", o.Kind, err)
	}
	e.mu.Lock()
	err = e.moveLocked(to, "")
	e.why, e.outcome = why, &o
	e.mu.Unlock()
	if err != nil {
		return err
	}
	e.log.Info("episode ended by itself", "outcome", string(o.Kind), "code", o.Code)
	// Host objects go once the supervisor has stopped (settle).
	return errFinished
}

// endRetries bounds how often finish asks a store that is unavailable to
// end the episode, and endBackoff the first pause (doubling) between.
const (
	endRetries = 5
	endBackoff = 200 * time.Millisecond
)

// endInStore ends the episode in the store, retrying while the store is
// unavailable. An attempt whose outcome was unknown may have committed: a
// later attempt then finds the episode already ended, which is success
// when it ended in the state asked for.
func endInStore(ctx context.Context, st store.Store, req store.EndEpisode) error {
	var err error
	for i := 0; i < endRetries; i++ {
		if i > 0 {
			select {
			case <-time.After(endBackoff << (i - 1)):
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			}
		}
		if _, err = st.EndEpisode(ctx, req); err == nil {
			return nil
		}
		switch protocol.AsWire(err).Code {
		case protocol.CodeAuthorityUnavailable:
			continue
		case protocol.CodeIllegalTransition:
			if i > 0 {
				if rec, rerr := st.Episode(ctx, req.EpisodeID); rerr == nil && rec.State == req.State {
					return nil
				}
			}
		}
		return err
	}
	return err
}

// harvestTimeout bounds one harvest: checkpoint, read, and the effect's
// way across the horizon (verification included).
const harvestTimeout = 10 * time.Minute

// harvest takes the exited worker's change and proposes it. Its steps
// are bounded by harvestTimeout; a wait on the change's Action is bounded
// by the episode's wall time instead (awaitAnswer).
func (e *Episode) harvest(parent context.Context) Outcome {
	ctx, cancel := context.WithTimeout(parent, harvestTimeout)
	defer cancel()
	h := e.spec.Harvest
	failed := func(format string, args ...any) Outcome {
		return Outcome{Kind: OutcomeFailed, Reason: fmt.Sprintf(format, args...)}
	}
	// The final checkpoint comes first: recorded unstable (it holds the
	// worker's unverified writes, and no repair may restore it), it is
	// also the ledger's record that the worker exited and the harvest
	// began, which a kernel start reads (harvested) so it never resumes a
	// worker whose change already landed.
	res, ckErr := e.finalCheckpoint(ctx)
	// A worker that committed through the broker itself owns its change:
	// proposing the same edit again would be a second commit of it (or a
	// ref_moved denial). Its last commit on the harvest target is the
	// outcome; edits it made after that and did not commit stay behind.
	if o, ok, err := e.committedByWorker(ctx); err != nil {
		return failed("reading the episode's effects: %v", err)
	} else if ok {
		return o
	}
	if ckErr != nil {
		return failed("%s", ckErr)
	}
	if e.k.cfg.Archives == nil {
		return failed("no checkpoint archive source is configured")
	}
	rc, err := e.k.cfg.Archives.OpenArchive(ctx, res.SHA256)
	if err != nil {
		return failed("opening the final checkpoint: %v", err)
	}
	var admit workspace.Admit
	if e.k.cfg.HarvestAdmit != nil {
		admit = e.k.cfg.HarvestAdmit(h.TargetID)
	}
	lim := e.k.cfg.HarvestLimits
	if e.spec.Setup != nil {
		// The final archive holds the setup layer too.
		l, err := e.verifyLayer(ctx)
		if err != nil {
			rc.Close()
			return failed("the setup layer: %v", err)
		}
		lim = lim.Widen(l.Shadow)
	}
	ch, err := workspace.Harvest(ctx, rc, res.SHA256, workspace.Clone{Root: e.k.cfg.WorkspacesRoot, ID: e.id.String(),
		BaseOID: e.spec.BaseOID, Git: e.k.cfg.Git}, lim, admit)
	rc.Close()
	var refusal *workspace.Refusal
	switch {
	case errors.As(err, &refusal):
		// The operator's record names the path (escaped); the worker
		// has exited and is told nothing.
		return Outcome{Kind: OutcomeDenied, Code: string(protocol.CodeForbidden), Reason: "harvest: " + refusal.Operator()}
	case err != nil:
		return failed("reading the change: %v", err)
	}
	var o Outcome
	if len(ch.Patch) == 0 {
		o = Outcome{Kind: OutcomeNothing}
	} else {
		o = e.propose(ctx, parent, h, ch.Patch)
	}
	o.Ignored, o.IgnoredSample = ch.Ignored.Count, ch.Ignored.Sample
	return o
}

// finalCheckpoint checkpoints the exited worker's domain and records it
// unstable.
func (e *Episode) finalCheckpoint(ctx context.Context) (*protocol.CheckpointResult, error) {
	if !e.k.feat.Checkpoints {
		return nil, errors.New(noCheckpoints(e.k.feat))
	}
	// The base is recorded first, so it never follows the final one.
	_ = e.awaitBase()
	e.mu.Lock()
	gen := e.gen
	e.mu.Unlock()
	id := e.k.launcherID(e.id, gen)
	res, err := e.k.cfg.Domains.Checkpoint(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("final checkpoint: %s", protocol.AsWire(err).Code)
	}
	e.mu.Lock()
	epoch, dom := e.epoch, e.domainID
	e.taken = append(e.taken, heldCheckpoint{id, res.SHA256})
	e.mu.Unlock()
	if _, err := e.k.cfg.Store.RecordCheckpoint(ctx, store.NewCheckpoint{EpisodeID: e.id, DomainID: dom, Generation: gen, Epoch: epoch,
		Digest: "sha256:" + res.SHA256}); err != nil {
		return nil, fmt.Errorf("recording the final checkpoint: %v", err)
	}
	return res, nil
}

// harvested is what a kernel start reads before resuming an episode: when
// the ledger shows its harvest began (the final checkpoint, the only one
// recorded unstable) and a git_commit on the harvest target committed, the
// change landed and only the record of the end was lost (the kernel died,
// or the store was unreachable, between the two). The episode then ends
// with that outcome; resuming would re-run a worker whose change landed.
func (e *Episode) harvested(ctx context.Context) (Outcome, bool, error) {
	if e.spec.Harvest == nil {
		return Outcome{}, false, nil
	}
	evs, err := e.k.cfg.Store.Events(ctx, e.id)
	if err != nil {
		return Outcome{}, false, err
	}
	began := false
	for _, ev := range evs {
		var b struct {
			Stable *bool `json:"stable"`
		}
		if ev.Kind == "checkpoint_recorded" && json.Unmarshal(ev.Body, &b) == nil && b.Stable != nil && !*b.Stable {
			began = true
		}
	}
	if !began {
		return Outcome{}, false, nil
	}
	o, ok, err := e.committedByWorker(ctx)
	if err != nil || !ok {
		return Outcome{}, false, err
	}
	o.Reason = "landed by the harvest before a kernel restart; the episode ended at kernel start, its worker not run again"
	return o, true, nil
}

// propose walks the patch across the horizon as a worker's request would
// go — the broker's Prepare (fence, quotas, adapter validation), Evaluate
// (verification and the sensors when configured) and Commit (the whole
// commit check) — under the episode's current epoch and lease. It calls
// them directly rather than through the socket dispatch so a denial keeps
// its reason (the wire form keeps only the catalogue code). A change that
// waits on a human (a class 4 target, or one outside the lease under
// escalate_outside_lease) waits for its Action's answer, under parent.
func (e *Episode) propose(ctx, parent context.Context, h *HarvestSpec, patch []byte) Outcome {
	t := map[string]any{"base_oid": e.spec.BaseOID, "ref": h.Ref, "message": commitMessage(e.spec.OriginIntent, e.id)}
	if h.Create {
		t["create"] = true
	}
	target, _ := json.Marshal(t)
	e.mu.Lock()
	epoch, lease := e.epoch, e.lease.ID
	e.mu.Unlock()
	b := e.k.cfg.Broker
	denied := func(step string, id uuid.UUID, err error) Outcome {
		o := Outcome{Kind: OutcomeDenied, Code: string(protocol.AsWire(err).Code), Reason: step + ": " + err.Error()}
		if id != uuid.Nil {
			o.Effect = id.String()
		}
		switch protocol.AsWire(err).Code {
		case protocol.CodeCommitUnknown, protocol.CodeInternal, protocol.CodeAuthorityUnavailable:
			o.Kind = OutcomeFailed
		}
		return o
	}
	eff, err := b.PrepareKernel(ctx, e.id, &protocol.WorkerRequest{Protocol: protocol.WorkerVersion, RequestID: uuid.NewString(),
		Epoch: epoch, Action: protocol.WorkerPrepare, LeaseID: lease.String(), Kind: "git_commit", TargetID: h.TargetID,
		Target: target}, patch)
	if err != nil {
		return denied("prepare", uuid.Nil, err)
	}
	id := eff.ID
	if eff, err = b.Evaluate(ctx, eff, eff.Revision, epoch, nil); err != nil {
		return denied("evaluate", id, err)
	}
	if eff.State == store.Evaluating && eff.AwaitsHuman() {
		var o *Outcome
		if eff, o = e.awaitAnswer(parent, eff); o != nil {
			return *o
		}
		// The answer may have come long after the harvest began: its
		// commit has its own bound.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, harvestTimeout)
		defer cancel()
	}
	if eff.State != store.Ready {
		return Outcome{Kind: OutcomeDenied, Code: string(protocol.CodeApprovalRequired), Effect: eff.ID.String(),
			Reason: "evaluate: the effect is " + string(eff.State)}
	}
	if why := e.semanticDenial(ctx, eff); why != "" {
		// The commit would be refused for it (and the slow loop may have
		// contained the episode already): say what the slow loop said.
		return Outcome{Kind: OutcomeDenied, Code: string(protocol.CodeForbidden), Effect: eff.ID.String(), Reason: "evaluate: " + why}
	}
	if eff, err = b.Commit(ctx, eff, eff.Revision, epoch); err != nil {
		return denied("commit", id, err)
	}
	var receipt struct {
		Ref string `json:"ref"`
		OID string `json:"oid"`
	}
	_ = json.Unmarshal(eff.Receipt, &receipt)
	return Outcome{Kind: OutcomeLanded, Ref: receipt.Ref, Commit: receipt.OID, Effect: eff.ID.String()}
}

// awaitAnswer waits, parked, for the answer to the Action of the
// harvest's change eff: the worker has exited, so there is nothing to
// freeze, and the episode's wall time bounds the wait (its timer is not
// read while the harvest runs). It returns the effect once approved, or
// the outcome of any other answer — denied, dismissed, superseded — or of
// no answer in time. An answer through any kernel counts: it is read from
// the store.
func (e *Episode) awaitAnswer(parent context.Context, eff store.Effect) (store.Effect, *Outcome) {
	ctx := parent
	if end, ok := e.wallDeadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	e.setParked(true)
	defer e.setParked(false)
	e.log.Info("parked: the harvest's change waits on its Action", "effect", eff.ID, "revision", eff.Revision)
	unanswered := func(why string) *Outcome {
		return &Outcome{Kind: OutcomeDenied, Code: string(protocol.CodeApprovalRequired), Effect: eff.ID.String(), Reason: "evaluate: " + why}
	}
	t := time.NewTicker(parkPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return eff, &Outcome{Kind: OutcomeFailed, Effect: eff.ID.String(), Reason: "the kernel stopped while the change's Action waited"}
			}
			return eff, unanswered("no answer to its Action within the episode's wall time")
		case <-t.C:
		}
		a, err := e.k.cfg.Store.ActionFor(ctx, eff.ID, eff.Revision, eff.Epoch)
		if err != nil || a.State == store.ActionPending {
			continue
		}
		e.log.Info("resumed: the harvest's Action was answered", "effect", eff.ID, "action_state", a.State)
		switch a.State {
		case store.ActionApproved:
			got, err := e.k.cfg.Store.Effect(ctx, eff.ID)
			if err != nil {
				return eff, &Outcome{Kind: OutcomeFailed, Effect: eff.ID.String(), Reason: fmt.Sprintf("reading the approved effect: %v", err)}
			}
			return got, nil
		case store.ActionDenied:
			return eff, &Outcome{Kind: OutcomeDenied, Code: string(protocol.CodeForbidden), Effect: eff.ID.String(),
				Reason: "evaluate: a human denied the change"}
		}
		return eff, unanswered("its Action was " + string(a.State))
	}
}

// semanticDenial is why the slow loop's decision on eff's revision
// refused it (the lease's first refusal, or the deciding reading), or ""
// when it allowed it or recorded none.
func (e *Episode) semanticDenial(ctx context.Context, eff store.Effect) string {
	ds, err := e.k.cfg.Store.Decisions(ctx, eff.ID)
	if err != nil {
		return ""
	}
	for _, d := range ds {
		if d.Kind != store.DecisionSemantic || d.Revision != eff.Revision || d.Epoch != eff.Epoch || d.Verdict == store.VerdictAllow {
			continue
		}
		var b struct {
			Decider     string `json:"decider"`
			LeaseDenied string `json:"lease_denied"`
		}
		_ = json.Unmarshal(d.Body, &b)
		if b.LeaseDenied != "" {
			return "the lease refused it: " + b.LeaseDenied
		}
		return "the slow loop refused it: " + b.Decider
	}
	return ""
}

// committedByWorker finds the last committed git_commit on the harvest's
// target and ref, from the episode's ledger: the harvest's own before a
// restart, or the worker's where the spec lets it commit. A commit to
// another ref is never this episode's outcome (it would report a change
// landed where the operator did not ask for one).
func (e *Episode) committedByWorker(ctx context.Context) (Outcome, bool, error) {
	evs, err := e.k.cfg.Store.Events(ctx, e.id)
	if err != nil {
		return Outcome{}, false, err
	}
	var found *store.Effect
	for _, ev := range evs {
		if ev.Kind != "effect_proposed" {
			continue
		}
		var b struct {
			EffectID uuid.UUID `json:"effect_id"`
			Kind     string    `json:"kind"`
			TargetID string    `json:"target_id"`
		}
		if json.Unmarshal(ev.Body, &b) != nil || b.Kind != "git_commit" || b.TargetID != e.spec.Harvest.TargetID {
			continue
		}
		eff, err := e.k.cfg.Store.Effect(ctx, b.EffectID)
		if err != nil {
			return Outcome{}, false, err
		}
		var t struct {
			Ref string `json:"ref"`
		}
		if eff.State == store.Committed && json.Unmarshal(eff.Target, &t) == nil && t.Ref == e.spec.Harvest.Ref {
			found = &eff
		}
	}
	if found == nil {
		return Outcome{}, false, nil
	}
	var receipt struct {
		Ref string `json:"ref"`
		OID string `json:"oid"`
	}
	_ = json.Unmarshal(found.Receipt, &receipt)
	return Outcome{Kind: OutcomeLanded, Ref: receipt.Ref, Commit: receipt.OID, Effect: found.ID.String(),
		Reason: "already committed on the harvest target in this episode (by its worker, or a harvest before a restart); not harvested again"}, true, nil
}

// maxMessage keeps the commit message within the git_commit adapter's cap
// (4096 bytes) with room for its trailer.
const maxMessage = 3000

// commitMessage is made from the task alone. The agent's own words are not
// read: its captured output mixes every tool's stdout and stderr, and its
// HOME is never harvested, so no channel says honestly "this is the
// agent's final message". The task is operator text, still sanitised:
// printable characters and newlines only, no trailer the adapter reserves.
func commitMessage(intent string, episode uuid.UUID) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case !broker.MessageRune(r):
			return -1
		}
		return r
	}, strings.ToValidUTF8(intent, ""))
	clean = strings.ReplaceAll(clean, broker.TrailerKey, "Autonomic effect")
	// A task line that reads as an identity trailer would make the
	// adapter refuse the message: it is quoted instead.
	lines := strings.Split(clean, "\n")
	for i, l := range lines {
		if broker.IdentityTrailer(l) {
			lines[i] = "> " + strings.Replace(l, ":", " -", 1)
		}
	}
	clean = strings.Join(lines, "\n")
	clean = strings.TrimSpace(clean)
	subject, _, _ := strings.Cut(clean, "\n")
	if r := []rune(subject); len(r) > 72 {
		subject = string(r[:69]) + "..."
	}
	if subject == "" {
		subject = "Agent change"
	}
	body := clean
	if len(body) > maxMessage {
		body = strings.ToValidUTF8(body[:maxMessage], "")
	}
	return subject + "\n\nTask:\n" + body + "\n\nHarvested by Autonomic from episode " + episode.String() +
		": the agent's workspace change, proposed on its behalf through the commit horizon.\n"
}
