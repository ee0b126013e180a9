package authority

// Request is one question to a lease: may it do an effect of this class, of
// this kind, on this target, touching this path, of this size, given what
// has already been spent? The caller fills Spent and RecentEffects from the
// durable store; the check itself never looks anything up.
type Request struct {
	Class  Class
	Kind   string // effect kind; only for brokered classes
	Target string // configured target id; only for brokered classes
	// Path is a clean, relative, slash-separated path, or "" when the effect
	// names no path (an HTTP read, say). A patch is checked once per path.
	Path          string
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
	}
	return "unknown"
}

// Check answers a Request. It is the hot path: pure, allocation-free, and
// bounded by the capability limits (MaxGlobs, MaxClauses, MaxPathLen).
// Order: cheap structural refusals first, then the grant, then paths (a
// forbid beats every allow), then budgets.
func (c *Capability) Check(r *Request) Reason {
	if !c.ok {
		return DenyNoLease
	}
	if r.Class > c.maxClass {
		return DenyClass
	}
	if r.Class.Brokered() {
		g := c.grant(r.Target, r.Kind)
		if g == nil || r.Class > g.MaxClass {
			return DenyNoGrant
		}
	}
	if r.Path != "" {
		var sp splitPath
		if !sp.split(r.Path) {
			return DenyBadPath
		}
		for i := range c.forbid {
			if c.forbid[i].match(&sp) {
				return DenyPathForbidden
			}
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
		if clause[i].match(sp) {
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
