package governor

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/homeostat"
	"github.com/autonomic-kernel/autonomic/store"
)

// CheckLease is broker.Config.LeaseCheck: the whole lease, as the
// episode's current verdict leaves it standing, asked about the effect and
// each path it touches, with the durable spend the store read under the
// commit's locks. The verdict is the homeostat's regime, the regulator's
// level and the last slow-loop contraction, so a Throttle halves
// effects_per_minute here, where it is counted. An episode
// the governor does not watch is in containment: nothing commits for it.
func (g *Governor) CheckLease(ctx context.Context, q broker.LeaseQuery) error {
	return LeaseCheckWith(g.verdict)(ctx, q)
}

// LeaseCheckWith is the lease check under the verdicts verdict gives per
// episode (CheckLease uses the governor's; a broker composed without a
// governor, in a test or a gate, names its own).
func LeaseCheckWith(verdict func(episodeID uuid.UUID) authority.Verdict) broker.LeaseCheck {
	return func(_ context.Context, q broker.LeaseQuery) error {
		touches := make([]authority.Touch, len(q.Touches))
		for i, t := range q.Touches {
			touches[i] = authority.Touch{Path: t.Path, Executable: t.Executable}
		}
		r := authority.Request{Class: authority.Class(q.Class), Kind: q.Kind, Target: q.TargetID, Ref: q.Ref, Bytes: q.Bytes,
			Spent: q.Spent.Bytes, RecentEffects: q.Spent.LastMinute, GrantLifted: q.OutsideLease}
		return authority.CheckCommit(q.Lease, verdict(q.EpisodeID), r, touches).Err()
	}
}

func (g *Governor) verdict(id uuid.UUID) authority.Verdict {
	r, ok := g.record(id)
	if !ok {
		return authority.Decide([]authority.Signal{homeostat.Containment.Signal()})
	}
	return r.commitVerdict()
}

// commitVerdict is the fast loop's standing verdict for the episode.
func (e *Record) commitVerdict() authority.Verdict {
	level := e.g.regulatorState().Level
	e.hmu.Lock()
	signals := []authority.Signal{e.home.State().Regime.Signal(), level.Signal()}
	if e.slow.Source != authority.SourceInvalid { // none before the first evaluation
		signals = append(signals, e.slow)
	}
	e.hmu.Unlock()
	return authority.Decide(signals)
}

// holdSlow keeps the contraction of a slow-loop verdict for the commit
// horizon: a Throttle, Narrow or Interrupt stands until the next
// evaluation says otherwise (a Revoke there is about that effect's own
// paths, and refused it). It is held as a semantic signal, which can only
// ever contract.
func (e *Record) holdSlow(v authority.Verdict) {
	s := authority.Signal{Source: authority.SourceSemantic, Code: "slow_loop"}
	switch v.Action {
	case authority.Throttle, authority.Narrow, authority.Interrupt:
		s.Action, s.Ceiling = v.Action, v.Ceiling
	}
	e.hmu.Lock()
	e.slow = s
	e.hmu.Unlock()
}

// Evaluate is broker.Config.Verifier, always: the slow loop for every
// class 3+ effect. Verification is its first step when
// automatic_verification is on (the runner); then the sensor bank runs and
// the semantic decision is recorded (see slow.go). Without a runner the
// recorded verification says none ran (verify.RuleOff), and the bank reads
// the effect as exempt from tests, as for unverified_kinds.
func (g *Governor) Evaluate(ctx context.Context, e store.Effect, payload []byte) (string, json.RawMessage, error) {
	return g.evaluate(ctx, e, payload)
}
