package governor

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/homeostat"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/kernel/verify"
	"github.com/autonomic-kernel/autonomic/store"
)

// evaluate is the slow loop for one class 3+ effect: verification first
// (deterministic, and evidence for the bank), then the sensor bank and
// authority.Decide. The verification verdict is returned for the broker
// to record; the semantic verdict is recorded here, and a deny stops the
// commit at the commit check.
func (g *Governor) evaluate(ctx context.Context, eff store.Effect, payload []byte) (string, json.RawMessage, error) {
	e, ok := g.record(eff.EpisodeID)
	if !ok {
		return "", nil, errors.New("episode: the effect's episode is not driven by this controller")
	}
	// Once this evaluation's decisions are recorded, a patch that writes
	// a path the lease forbids contains the episode, whatever they say.
	defer e.containForbiddenWrites(eff, payload)
	verdict, body, err := g.verify(ctx, e, eff, payload)
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
	e.Remember(events...)
	if err := e.semantic(ctx, eff, payload, exempt(verdict, body)); err != nil {
		return "", nil, err
	}
	return verdict, body, nil
}

// verify is the slow loop's first step: the runner's verdict, or, with
// automatic_verification off, an allow whose body says no verification ran.
func (g *Governor) verify(ctx context.Context, e *Record, eff store.Effect, payload []byte) (string, json.RawMessage, error) {
	if g.cfg.Verification == nil {
		body, err := json.Marshal(verify.Body{EffectID: eff.ID, Revision: eff.Revision, Epoch: eff.Epoch, PayloadDigest: eff.PayloadDigest,
			Reason: "automatic_verification is off: no verification ran", Rule: verify.RuleOff})
		return store.VerdictAllow, body, err
	}
	var eg *verify.Egress
	if e.ep.VerifyEgress != nil {
		eg = e.ep.VerifyEgress()
	}
	var layer *verify.Layer
	if e.ep.VerifyLayer != nil {
		// A layer the episode has and cannot hand over is an error: the
		// tests never run without what they were set up with.
		var err error
		if layer, err = e.ep.VerifyLayer(ctx); err != nil {
			return "", nil, err
		}
	}
	return g.cfg.Verification.VerifyWith(ctx, eff, payload, eg, layer)
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

// exempt: the configuration let the effect pass without a test — its
// kind in unverified_kinds, or automatic_verification off.
func exempt(verdict string, body json.RawMessage) bool {
	var b struct {
		Rule string `json:"rule"`
	}
	return verdict == store.VerdictAllow && json.Unmarshal(body, &b) == nil && (b.Rule == verify.RuleNone || b.Rule == verify.RuleOff)
}

// containForbiddenWrites reports a patch that touches a path the episode's
// lease forbids (a forbid glob, not merely outside the allowed scope) as
// the kernel denial it is: a critical frame the homeostat contains on
// without smoothing, so the episode is repaired (or finally contained)
// at once. The semantic decision has already refused the effect.
func (e *Record) containForbiddenWrites(eff store.Effect, payload []byte) {
	paths, _ := patchPaths(payload)
	lease := e.ep.Lease()
	req := authority.Request{Class: authority.Class(eff.Class), Kind: eff.Kind, Target: eff.TargetID, Ref: broker.EffectRef(eff.Target),
		GrantLifted: eff.OutsideLease != "", Bytes: int64(len(payload))}
	for _, p := range paths {
		req.Path = p
		if lease.Check(&req) == authority.DenyPathForbidden {
			reason := "forbidden path write: " + p
			if e.observe(frame{epoch: eff.Epoch, sample: homeostat.Sample{Denial: homeostat.ForbiddenPathWrite}, reason: reason}, true) != nil {
				// A queue full of critical frames: contain directly.
				e.ep.Contain(eff.Epoch, reason+" (sensor queue full)")
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
	// LeaseDenied is the first thing the episode's own lease refused
	// (its signed path rule, a grant, a budget), before any reading:
	// what a reader checks to know the policy, not the bank, said no.
	LeaseDenied string `json:"lease_denied,omitempty"`
}

type semanticRecord struct {
	Identity     sensor.Identity     `json:"identity"`
	Cause        string              `json:"cause"`
	Observations []map[string]string `json:"observations"`
}

// frame is what the bank reads of a proposed effect: the episode's
// purpose, the effect's evidence, and whether its current lease lifts
// the dependencies rule.
func (e *Record) frame(eff store.Effect, paths []string, payload []byte, history []sensor.Event, exempt bool) *sensor.Frame {
	f := &sensor.Frame{Intent: e.ep.Intent, Scope: e.ep.Scope, Paths: paths, Diff: payload, History: history,
		Effect: &sensor.Effect{Kind: eff.Kind, Target: eff.TargetID, Class: authority.Class(eff.Class), Exempt: exempt}}
	if e.ep.Lease != nil {
		f.Dependencies = e.ep.Lease().Lifted(authority.LiftDependencies)
	}
	return f
}

// semantic runs the bank on the effect's evidence, decides and records.
// exempt: the verifier passed it by configuration (see exempt).
func (e *Record) semantic(ctx context.Context, eff store.Effect, payload []byte, exempt bool) error {
	k := e.g
	class := authority.Class(eff.Class)
	paths, readable := patchPaths(payload)
	e.hmu.Lock()
	history := append([]sensor.Event(nil), e.history...)
	regime := e.home.State().Regime
	e.hmu.Unlock()
	f := e.frame(eff, paths, payload, history, exempt)

	readings := []sensor.Reading{k.rules.Observe(ctx, f)}
	if k.cfg.Sensor != nil {
		rd := k.cfg.Sensor.Observe(ctx, f)
		readings = append(readings, rd)
		k.health(rd.Cause.Fault())
	}
	level := k.regulatorState().Level

	lease := e.ep.Lease()
	signals := make([]authority.Signal, 0, len(readings)*sensor.BankSize+5+len(paths))
	signals = append(signals, bankSignals(readings, e.ep.MaxRisk)...)
	signals = append(signals, regime.Signal(), level.Signal())
	spent, err := k.cfg.Store.Spend(ctx, eff.EpisodeID)
	if err != nil {
		return err
	}
	// The durable spend as of now: the commit horizon reads it again under
	// its locks and decides; here it lets the evaluation say so early.
	req := authority.Request{Class: class, Kind: eff.Kind, Target: eff.TargetID, Ref: broker.EffectRef(eff.Target), Bytes: int64(len(payload)),
		Spent: spent.Bytes, RecentEffects: spent.LastMinute, GrantLifted: eff.OutsideLease != ""}
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
		e.Remember(sensor.Event{Kind: sensor.EventCapabilityDenied, Detail: leaseDenial})
	case !allow:
		e.Remember(sensor.Event{Kind: sensor.EventEffectDenied, Detail: "semantic: " + v.Decider.Code})
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
	epoch := e.ep.Epoch()
	_ = e.observe(frame{epoch: epoch, sample: homeostat.Sample{Drift: drift, Uncertainty: unc}}, false)

	body := semanticBody{Schema: sensor.SchemaVersion, Action: v.Action.String(), Ceiling: int(v.Ceiling), Decider: v.Decider.Code,
		Regime: regime.String(), Level: level.String(), PathsDeny: denied, LeaseDenied: leaseDenial}
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
