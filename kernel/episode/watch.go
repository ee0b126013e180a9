package episode

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/homeostat"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/kernel/supervisor"
	"github.com/autonomic-kernel/autonomic/store"
)

// The watching loops (ARCHITECTURE §6). The fast loop: the domain pushes
// the monitor's deterministic frames (violations) onto the episode's
// bounded sensor queue as critical frames, and the episode's watch child
// folds every frame into its homeostat; containment asks for a repair. The
// slow loop runs at evaluate, inside Observer.Verify: the sensor bank reads
// the effect's evidence and authority.Decide weighs it with the
// deterministic signals; the verdict is recorded as a semantic decision
// bound to the effect's revision and epoch, which the commit check requires
// to allow. The regime the broker sees at prepare and commit is the
// homeostat's regime capped by the regulator's level.

// frame is one entry of an episode's sensor queue.
type frame struct {
	epoch  int64 // frames of an older epoch describe a destroyed generation
	sample homeostat.Sample
	reason string
}

// historyLimit bounds the history an episode keeps for its sensors.
const historyLimit = 64

// regimeName is what the broker sees: the homeostat's regime, qualified by
// the regulator's level when that is below act.
func regimeName(r homeostat.Regime, l regulator.Level) string {
	if l == regulator.Act {
		return r.String()
	}
	return r.String() + "@" + l.String()
}

// RegimeMaxClass is broker.Config.RegimeMaxClass for a broker whose
// Trajectory is Observer.Trajectory: each regime and level names the lower
// of the two class ceilings. A broker left with its default table refuses
// every qualified name, so a forgotten table fails closed.
func RegimeMaxClass() map[string]int {
	out := map[string]int{}
	for r := homeostat.Stable; r <= homeostat.Containment; r++ {
		for l := regulator.Observe; l <= regulator.Act; l++ {
			out[regimeName(r, l)] = int(min(r.MaxClass(), l.MaxClass()))
		}
	}
	return out
}

// Trajectory is broker.Config.Trajectory: the episode's trajectory version
// and regime. An episode this controller does not drive (not started yet,
// or ended) is in containment: nothing crosses the horizon for it.
func (o *Observer) Trajectory(_ context.Context, id uuid.UUID) (int64, string) {
	k := o.k.Load()
	if k == nil {
		return 0, homeostat.Containment.String()
	}
	e, ok := k.Episode(id)
	if !ok {
		return 0, homeostat.Containment.String()
	}
	return e.trajectory()
}

// trajectory is the episode's version and regime name. The version moves
// whenever either the homeostat's regime or the regulator's level does.
func (e *Episode) trajectory() (int64, string) {
	rs := e.k.regulatorState()
	e.hmu.Lock()
	hs := e.home.State()
	e.hmu.Unlock()
	return int64(hs.Version+rs.Version) + 1, regimeName(hs.Regime, rs.Level)
}

// regulatorState is the regulator's reading (act, version 0, without one).
func (k *Kernel) regulatorState() regulator.State {
	if k.reg == nil {
		return regulator.State{Level: regulator.Act}
	}
	k.regMu.Lock()
	defer k.regMu.Unlock()
	return k.reg.State()
}

// ReportHealth folds one observation into the regulator. within names the
// faults this report speaks for (the store's reachability, the broker's
// saturation, the sensor bank's health); faults are those of them seen
// now. Faults outside within keep their last reported state, so one
// source's health never hides another's degradation. The regulator sees
// the union.
func (k *Kernel) ReportHealth(within, faults regulator.Fault) {
	if k.reg == nil {
		return
	}
	k.regMu.Lock()
	defer k.regMu.Unlock()
	k.faults = k.faults&^within | faults&within
	before := k.reg.Level()
	st, err := k.reg.Observe(regulator.Health{At: time.Now(), Faults: k.faults})
	if err != nil {
		k.log.Warn("regulator observation refused", "error", err)
		return
	}
	if st.Level != before {
		k.log.Warn("regulator: autonomy level changed", "from", before.String(), "to", st.Level.String(),
			"faults", st.Faults.String(), "max_class", int(st.Level.MaxClass()))
	}
}

// Regulator is the regulator's reading (act, version 0, without one).
func (k *Kernel) Regulator() regulator.State { return k.regulatorState() }

// health is the sensor bank's report.
func (k *Kernel) health(f regulator.Fault) {
	k.ReportHealth(regulator.SemanticOutage|regulator.UnpinnedModel, f)
}

// ceiling is the class ceiling for every lease minted now: the configured
// ceiling under the regulator's level.
func (k *Kernel) ceiling() authority.Class {
	return min(k.cfg.Ceiling(), k.regulatorState().Level.MaxClass())
}

// observe queues a frame for the watch child. A critical frame is never
// dropped; when the queue is full of critical frames it reports so, and
// the caller contains at once.
func (e *Episode) observe(f frame, critical bool) error {
	if critical {
		return e.frames.PushCritical(f)
	}
	if !e.frames.PushSemantic(f) {
		e.log.Debug("semantic frame dropped", "dropped", e.frames.Stats().Dropped)
	}
	return nil
}

// watch is the supervisor child between authority and the broker: it folds
// the queue's frames into the homeostat and asks for a repair when the
// regime reaches containment. If it dies, the broker and the domain go
// with it.
func (e *Episode) watch(ctx context.Context, ready func()) error {
	ready()
	for {
		f, _, err := e.frames.Pop(ctx)
		if err != nil {
			return errStopped(ctx, err)
		}
		e.mu.Lock()
		current := e.epoch
		e.mu.Unlock()
		if f.epoch != current {
			continue
		}
		f.sample.At = time.Now()
		e.hmu.Lock()
		st, err := e.home.Observe(f.sample)
		e.hmu.Unlock()
		if err != nil {
			e.log.Warn("homeostat refused a sample", "error", err)
			continue
		}
		if st.Regime == homeostat.Containment {
			why := "homeostat: " + st.Denial.String()
			if f.reason != "" {
				why = f.reason
			}
			e.containAt(f.epoch, why)
		}
	}
}

// resetTrajectory starts a repaired generation's trajectory afresh: the
// homeostat's state and the old generation's events go, but the episode's
// repairs stay, so a trajectory that keeps needing repair is seen as one.
func (e *Episode) resetTrajectory(reason string) {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	e.home.Reset(time.Now())
	var repairs []sensor.Event
	for _, ev := range e.history {
		if ev.Kind == sensor.EventRepair {
			repairs = append(repairs, ev)
		}
	}
	e.history = append(repairs, sensor.Event{Kind: sensor.EventRepair, Detail: reason})
}

func (e *Episode) remember(events ...sensor.Event) {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	e.history = append(e.history, events...)
	if n := len(e.history) - historyLimit; n > 0 {
		e.history = append(e.history[:0:0], e.history[n:]...)
	}
}

// evaluate is the slow loop for one class 3+ effect: verification first
// (deterministic, and evidence for the bank), then the sensor bank and
// authority.Decide. The verification verdict is returned for the broker
// to record; the semantic verdict is recorded here, and a deny stops the
// commit at the commit check.
func (k *Kernel) evaluate(ctx context.Context, eff store.Effect, payload []byte) (string, json.RawMessage, error) {
	e, ok := k.Episode(eff.EpisodeID)
	if !ok {
		return "", nil, errors.New("episode: the effect's episode is not driven by this controller")
	}
	// Once this evaluation's decisions are recorded, a patch that writes
	// a path the lease forbids contains the episode, whatever they say.
	defer e.containForbiddenWrites(eff, payload)
	verdict, body, err := k.cfg.Verification.VerifyWith(ctx, eff, payload, e.verifyEgress())
	if err != nil {
		return verdict, body, err
	}
	// The bank reads what really happened: the edit with its size, the
	// proposal, and the verification's outcome, failures included, so a
	// failed test is evidence for this decision and the next ones.
	var events []sensor.Event
	if eff.Kind == "git_commit" {
		events = append(events, sensor.Edit(payload))
	}
	events = append(events, sensor.Event{Kind: sensor.EventEffectProposed, Detail: eff.Kind})
	events = append(events, verificationEvents(verdict, body)...)
	e.remember(events...)
	if err := e.semantic(ctx, eff, payload); err != nil {
		return "", nil, err
	}
	return verdict, body, nil
}

// verificationEvents are the history entries of a verification verdict: a
// test that ran and passed or failed, or an effect the verifier refused
// before any test ran (a patch that does not apply, a kind it has no rule
// for). A kind the configuration lets pass unverified ran no test: nothing.
func verificationEvents(verdict string, body json.RawMessage) []sensor.Event {
	var b struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(body, &b)
	tested := strings.HasPrefix(b.Reason, "verify_argv")
	switch {
	case verdict == store.VerdictAllow && tested:
		return []sensor.Event{{Kind: sensor.EventTestPassed}}
	case verdict == store.VerdictAllow:
		return nil
	case tested:
		return []sensor.Event{{Kind: sensor.EventTestFailed, Detail: b.Reason}}
	}
	return []sensor.Event{{Kind: sensor.EventEffectDenied, Detail: "verification: " + b.Reason}}
}

// containForbiddenWrites reports a patch that touches a path the episode's
// lease forbids (a forbid glob, not merely outside the allowed scope) as
// the kernel denial it is: a critical frame the homeostat contains on
// without smoothing, so the episode is repaired (or finally contained)
// at once. The semantic decision has already refused the effect.
func (e *Episode) containForbiddenWrites(eff store.Effect, payload []byte) {
	paths, _ := patchPaths(payload)
	e.mu.Lock()
	lease := e.leaseCap
	e.mu.Unlock()
	req := authority.Request{Class: authority.Class(eff.Class), Kind: eff.Kind, Target: eff.TargetID, Bytes: int64(len(payload))}
	for _, p := range paths {
		req.Path = p
		if lease.Check(&req) == authority.DenyPathForbidden {
			reason := "forbidden path write: " + p
			if e.observe(frame{epoch: eff.Epoch, sample: homeostat.Sample{Denial: homeostat.ForbiddenPathWrite}, reason: reason}, true) != nil {
				// A queue full of critical frames: contain directly.
				e.containAt(eff.Epoch, reason+" (sensor queue full)")
			}
			return
		}
	}
}

// semanticBody is the recorded semantic decision: every reading with the
// identity of what produced it, and how Decide weighed them.
type semanticBody struct {
	Schema    string           `json:"schema"`
	Readings  []semanticRecord `json:"readings"`
	Action    string           `json:"action"`
	Ceiling   int              `json:"ceiling"`
	Decider   string           `json:"decider"`
	Regime    string           `json:"regime"`
	Level     string           `json:"level"`
	PathsDeny int              `json:"paths_denied"`
}

type semanticRecord struct {
	Identity     sensor.Identity     `json:"identity"`
	Cause        string              `json:"cause"`
	Observations []map[string]string `json:"observations"`
}

// semantic runs the bank on the effect's evidence, decides and records.
func (e *Episode) semantic(ctx context.Context, eff store.Effect, payload []byte) error {
	k := e.k
	class := authority.Class(eff.Class)
	paths, readable := patchPaths(payload)
	e.hmu.Lock()
	history := append([]sensor.Event(nil), e.history...)
	regime := e.home.State().Regime
	e.hmu.Unlock()
	f := &sensor.Frame{Intent: e.spec.OriginIntent, Scope: e.scope, Paths: paths, Diff: payload, History: history,
		Effect: &sensor.Effect{Kind: eff.Kind, Target: eff.TargetID, Class: class}}

	readings := []sensor.Reading{k.rules.Observe(ctx, f)}
	if k.cfg.Sensor != nil {
		rd := k.cfg.Sensor.Observe(ctx, f)
		readings = append(readings, rd)
		k.health(rd.Cause.Fault())
	}
	level := k.regulatorState().Level

	e.mu.Lock()
	lease := e.leaseCap
	e.mu.Unlock()
	signals := make([]authority.Signal, 0, len(readings)*sensor.BankSize+5+len(paths))
	signals = append(signals, bankSignals(readings, e.maxRisk)...)
	signals = append(signals, regime.Signal(), level.Signal())
	spent, err := k.cfg.Store.Spend(ctx, eff.EpisodeID)
	if err != nil {
		return err
	}
	// The durable spend as of now: the commit horizon reads it again under
	// its locks and decides; here it lets the evaluation say so early.
	req := authority.Request{Class: class, Kind: eff.Kind, Target: eff.TargetID, Bytes: int64(len(payload)),
		Spent: spent.Bytes, RecentEffects: spent.LastMinute}
	leaseDenial := "" // the first thing the lease refused, if any
	if r := lease.Check(&req); r == authority.Allowed {
		signals = append(signals, authority.Signal{Source: authority.SourcePolicy, Grant: true, Code: "lease"})
	} else {
		signals = append(signals, authority.Signal{Source: authority.SourceCapability, Action: authority.Revoke, Code: r.String()})
		leaseDenial = r.String()
	}
	if !readable {
		signals = append(signals, authority.Signal{Source: authority.SourceCapability, Action: authority.Revoke, Code: "unreadable_patch"})
		leaseDenial = cmp.Or(leaseDenial, "unreadable_patch")
	}
	for _, p := range paths {
		req.Path = p
		if r := lease.Check(&req); r != authority.Allowed {
			signals = append(signals, authority.Signal{Source: authority.SourceCapability, Action: authority.Revoke, Code: r.String()})
			leaseDenial = cmp.Or(leaseDenial, r.String())
		}
	}
	v := authority.Decide(signals)
	e.holdSlow(v)

	// What may commit is what the effective lease still allows: never
	// wider than the lease, whatever the bank said.
	granted := authority.Effective(lease, v)
	denied := 0
	req.Path = ""
	if granted.Check(&req) != authority.Allowed {
		denied++
	}
	for _, p := range paths {
		req.Path = p
		if granted.Check(&req) != authority.Allowed {
			denied++
		}
	}
	allow := v.Action < authority.Revoke && v.Ceiling >= class && level.MaxClass() >= class && regime.MaxClass() >= class && denied == 0
	switch {
	case leaseDenial != "":
		// The lease refused what the worker asked for: a capability
		// denial, the escalation signal, unlike a bank that said no.
		e.remember(sensor.Event{Kind: sensor.EventCapabilityDenied, Detail: leaseDenial})
	case !allow:
		e.remember(sensor.Event{Kind: sensor.EventEffectDenied, Detail: "semantic: " + v.Decider.Code})
	}

	// The trajectory learns from every reading that is evidence; a
	// degraded one is the regulator's business, not drift.
	var drift, unc float64
	for i := range readings {
		if readings[i].Cause != sensor.NotDegraded {
			continue
		}
		d, u := readings[i].Trajectory()
		drift, unc = max(drift, d), max(unc, u)
	}
	e.mu.Lock()
	epoch := e.epoch
	e.mu.Unlock()
	_ = e.observe(frame{epoch: epoch, sample: homeostat.Sample{Drift: drift, Uncertainty: unc}}, false)

	body := semanticBody{Schema: sensor.SchemaVersion, Action: v.Action.String(), Ceiling: int(v.Ceiling), Decider: v.Decider.Code,
		Regime: regime.String(), Level: level.String(), PathsDeny: denied}
	for _, rd := range readings {
		rec := semanticRecord{Identity: rd.Observations[0].Identity, Cause: rd.Cause.String()}
		for _, o := range rd.Observations {
			rec.Observations = append(rec.Observations, map[string]string{"sensor": string(o.Sensor), "level": o.Level.String(), "reason": o.Reason})
		}
		body.Readings = append(body.Readings, rec)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	verdict := store.VerdictDeny
	if allow {
		verdict = store.VerdictAllow
	}
	_, err = k.cfg.Store.RecordDecision(ctx, store.NewDecision{EffectID: eff.ID, Revision: eff.Revision, Epoch: eff.Epoch,
		Kind: store.DecisionSemantic, Verdict: verdict, Body: raw})
	return err
}

// maxPatchPaths bounds the paths taken from one patch; a patch naming more
// is sprawling, and the bank already says so from the first ones.
const maxPatchPaths = 1024

// patchPaths are the paths a git diff touches, old and new names both. ok
// is false when a file section names no path this parser can read (a
// quoted name, an unusual header): the caller then denies, since a path
// it cannot read is a path it cannot check against the lease.
func patchPaths(diff []byte) (paths []string, ok bool) {
	seen := map[string]bool{}
	add := func(p string) {
		if p == "" || p == "/dev/null" || seen[p] || len(paths) >= maxPatchPaths {
			return
		}
		seen[p] = true
		paths = append(paths, p)
	}
	sections, named := 0, 0 // file sections, and those a path was read from
	found := false
	sc := bufio.NewScanner(bytes.NewReader(diff))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, hdr := strings.CutPrefix(line, "diff --git "); hdr {
			if found {
				named++
			}
			sections++
			found = false
			// "a/X b/X": both halves name the same path unless renamed
			// (then the rename lines below name both).
			if h := (len(rest) - 1) / 2; len(rest)%2 == 1 && rest[h] == ' ' &&
				strings.HasPrefix(rest, "a/") && strings.HasPrefix(rest[h+1:], "b/") && rest[2:h] == rest[h+3:] {
				add(rest[2:h])
				found = true
			}
			continue
		}
		if (strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "+++ ")) && line[4:] != "/dev/null" &&
			!strings.HasPrefix(line, "--- a/") && !strings.HasPrefix(line, "+++ b/") {
			return paths, false // a quoted or unprefixed name
		}
		for _, pre := range []string{"--- a/", "+++ b/", "rename from ", "rename to ", "copy from ", "copy to "} {
			if p, cut := strings.CutPrefix(line, pre); cut {
				if strings.HasPrefix(p, "\"") {
					return paths, false
				}
				add(strings.TrimSuffix(p, "\t"))
				found = true
			}
		}
	}
	if found {
		named++
	}
	if sc.Err() != nil || sections > 0 && named != sections || len(paths) >= maxPatchPaths {
		return paths, false
	}
	return paths, true
}

func errStopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return supervisor.ErrStopped
	}
	return err
}
