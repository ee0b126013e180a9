package authority

import "slices"

// Request is one question to a lease: may it do an effect of this class, of
// this kind, on this target, touching this path, of this size, given what
// has already been spent? The caller fills Spent and RecentEffects from the
// durable store; the check itself never looks anything up.
type Request struct {
	Class  Class
	Kind   string // effect kind; only for brokered classes
	Target string // configured target id; only for brokered classes
	// Ref is the ref the effect names (git kinds), "" for none; a grant
	// that lists refs admits only those.
	Ref string
	// Path is a clean, relative, slash-separated path, or "" when the effect
	// names no path (an HTTP read, say). A patch is checked once per path.
	Path string
	// Executable: the effect leaves Path an executable file that was not
	// one before (a new 100755 file or a mode change to it).
	Executable bool
	// GrantLifted: the effect is outside the lease (store.Effect.
	// OutsideLease) and may cross only with a human's approval of it, which
	// the commit horizon requires apart: the grant (and its refs) is not
	// asked; the ceiling, paths and budgets are.
	GrantLifted   bool
	Bytes         int64 // payload size of this effect
	Spent         int64 // bytes of brokered effects already made under the lease
	RecentEffects int64 // brokered effects made in the last minute
}

// Reason says why Check refused, or Allowed.
type Reason uint8

const (
	Allowed Reason = iota
	DenyNoLease
	DenyClass
	DenyNoGrant
	DenyBadPath
	DenyPathForbidden
	DenyPathNotAllowed
	DenyBytes
	DenyRate
	DenyExecutable
	DenyRef
)

func (r Reason) String() string {
	switch r {
	case Allowed:
		return "allowed"
	case DenyNoLease:
		return "no_lease"
	case DenyClass:
		return "class_above_ceiling"
	case DenyNoGrant:
		return "no_grant"
	case DenyBadPath:
		return "bad_path"
	case DenyPathForbidden:
		return "path_forbidden"
	case DenyPathNotAllowed:
		return "path_not_allowed"
	case DenyBytes:
		return "byte_budget"
	case DenyRate:
		return "rate_budget"
	case DenyExecutable:
		return "executable_bit"
	case DenyRef:
		return "ref_not_granted"
	}
	return "unknown"
}

// Check answers a Request. It is the hot path: pure, bounded by the
// capability limits (MaxGlobs, MaxClauses, MaxPathLen), and
// allocation-free except for one folded copy of a path that is not
// already folded (upper-case or non-ASCII: pathglob.FoldString).
// Order: cheap structural refusals first, then the grant, then paths (a
// forbid, compared folded, beats every allow), then budgets.
func (c *Capability) Check(r *Request) Reason {
	if !c.ok {
		return DenyNoLease
	}
	if r.Class > c.maxClass {
		return DenyClass
	}
	if r.Class.Brokered() && !r.GrantLifted {
		g := c.grant(r.Target, r.Kind)
		if g == nil || r.Class > g.MaxClass {
			return DenyNoGrant
		}
		if g.Refs != nil && !slices.Contains(g.Refs, r.Ref) {
			return DenyRef
		}
	}
	if r.Path != "" {
		var sp, folded splitPath
		if !sp.Split(r.Path) {
			return DenyBadPath
		}
		if !folded.Fold(&sp) {
			// Its folded form is no path (a compatibility slash, say):
			// it cannot be checked against the forbids, so it is one.
			return DenyPathForbidden
		}
		for i := range c.forbid {
			if c.forbid[i].Match(&folded) {
				return DenyPathForbidden
			}
		}
		if r.Executable && !c.lifted.has(LiftExecutable) {
			return DenyExecutable
		}
		for _, clause := range c.allow {
			if !anyMatch(clause, &sp) {
				return DenyPathNotAllowed
			}
		}
	}
	if r.Class.Brokered() {
		b := &c.budget
		if r.Bytes < 0 || r.Spent < 0 || r.Bytes > b.BytesPerEffect || r.Spent > b.BytesTotal-r.Bytes {
			return DenyBytes
		}
		if r.RecentEffects < 0 || r.RecentEffects >= b.EffectsPerMinute {
			return DenyRate
		}
	}
	return Allowed
}

func anyMatch(clause []glob, sp *splitPath) bool {
	for i := range clause {
		if clause[i].Match(sp) {
			return true
		}
	}
	return false
}

// grant finds the grant for (target, kind); nil if there is none. Leases
// hold a handful of grants, so a scan comparing lengths first beats a
// binary search of string comparisons.
func (c *Capability) grant(target, kind string) *Grant {
	for i := range c.grants {
		g := &c.grants[i]
		if g.Target == target && g.Kind == kind {
			return g
		}
	}
	return nil
}
