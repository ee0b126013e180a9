package authority

import (
	"encoding/json"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// LeaseDocument is what a lease row stores: the capability in recordable
// form, plus the grants in the shape the broker's prepare reads
// ("effects"). The commit horizon re-reads it under the lease's lock and
// checks the whole of it (DecodeLease, then Check).
type LeaseDocument struct {
	Description
	Effects []BrokerGrant `json:"effects"`
}

// BrokerGrant is a Grant as the broker names it.
type BrokerGrant struct {
	Kind     string `json:"kind"`
	TargetID string `json:"target_id"`
	MaxClass int    `json:"max_class"`
}

// EncodeLease is the lease row's document for c.
func EncodeLease(c Capability) (json.RawMessage, error) {
	d := LeaseDocument{Description: c.Describe(), Effects: []BrokerGrant{}}
	for _, g := range d.Grants {
		d.Effects = append(d.Effects, BrokerGrant{Kind: g.Kind, TargetID: g.Target, MaxClass: int(g.MaxClass)})
	}
	return json.Marshal(d)
}

// DecodeLease reads back what EncodeLease stored, as a capability. A
// description's CNF allow clauses become one capability per clause,
// intersected, which is the same set; a document without a description
// (no allow clause) allows no path and no budget.
func DecodeLease(raw json.RawMessage) (Capability, error) {
	var d LeaseDocument
	if err := json.Unmarshal(raw, &d); err != nil {
		return Capability{}, err
	}
	clauses := d.Allow
	if len(clauses) == 0 {
		clauses = [][]string{{}}
	}
	caps := make([]Capability, 0, len(clauses))
	for _, allow := range clauses {
		c, err := Compile(Spec{MaxClass: d.MaxClass, Grants: d.Grants, Allow: allow, Forbid: d.Forbid, Budget: d.Budget, Lift: d.Lift})
		if err != nil {
			return Capability{}, err
		}
		caps = append(caps, c)
	}
	return Intersect(caps...), nil
}

// Touch is one path an effect changes.
type Touch struct {
	Path       string
	Executable bool
}

// CheckCommit is the whole-lease question of the commit horizon: the lease
// document doc, as the verdict v leaves it standing (Effective: a throttle
// halves its rate, a narrowing lowers its class), asked r (kind, target,
// class, bytes, durable Spent and RecentEffects) once, and then once per
// touched path. The first refusal wins.
func CheckCommit(doc json.RawMessage, v Verdict, r Request, touches []Touch) Reason {
	lease, err := DecodeLease(doc)
	if err != nil {
		return DenyNoLease
	}
	eff := Effective(lease, v)
	r.Path, r.Executable = "", false
	if why := eff.Check(&r); why != Allowed {
		return why
	}
	for _, t := range touches {
		r.Path, r.Executable = t.Path, t.Executable
		if why := eff.Check(&r); why != Allowed {
			return why
		}
	}
	return Allowed
}

// Err is a refusal as a catalogue error for the worker: budgets are
// limit_exceeded or rate_limited, everything else forbidden.
func (r Reason) Err() error {
	switch r {
	case Allowed:
		return nil
	case DenyBytes:
		return protocol.Errorf(protocol.CodeLimitExceeded, "lease: %s", r)
	case DenyRate:
		return protocol.Errorf(protocol.CodeRateLimited, "lease: %s", r)
	}
	return protocol.Errorf(protocol.CodeForbidden, "lease: %s", r)
}
