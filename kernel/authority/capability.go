package authority

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Class is an effect class (ARCHITECTURE §5): 0 local replayable,
// 1 isolated mutable (both inside the domain), 2 external observable,
// 3 authoritative external mutation, 4 irreversible.
type Class uint8

const (
	ClassLocal         Class = 0
	ClassIsolated      Class = 1
	ClassObservable    Class = 2
	ClassAuthoritative Class = 3
	ClassIrreversible  Class = 4
	MaxClass                 = ClassIrreversible
)

// Brokered reports whether effects of this class cross the broker (and so
// need a grant and spend budget).
func (c Class) Brokered() bool { return c >= ClassObservable }

// Grant names one brokered capability: an effect kind on one configured
// target, up to a class.
type Grant struct {
	Target   string `json:"target"`
	Kind     string `json:"kind"`
	MaxClass Class  `json:"max_class"`
	// Refs, when set, are the only refs an effect under the grant may
	// name (git_commit, git_remote): full ref names, exactly. Absent: any
	// ref the target itself allows.
	Refs []string `json:"refs,omitempty"`
}

// MaxGrantRefs bounds one grant's refs.
const MaxGrantRefs = 16

// validRef is a full ref name a grant may hold: refs/..., visible ASCII
// without spaces or the sequences git refuses.
func validRef(r string) bool {
	if !strings.HasPrefix(r, "refs/") || len(r) > 256 || strings.Contains(r, "..") || strings.HasSuffix(r, "/") ||
		strings.Contains(r, "//") || strings.HasSuffix(r, ".lock") || strings.Contains(r, "@{") {
		return false
	}
	for i := 0; i < len(r); i++ {
		if c := r[i]; c <= ' ' || c >= 0x7f || strings.IndexByte("~^:?*[\\", c) >= 0 {
			return false
		}
	}
	return true
}

// Budget bounds brokered effects. Zero means none: a budget is a limit, and
// the absent limit is the narrowest one, never "unlimited".
type Budget struct {
	BytesPerEffect   int64 `json:"bytes_per_effect"`
	BytesTotal       int64 `json:"bytes_total"`
	EffectsPerMinute int64 `json:"effects_per_minute"`
}

// MaxBudget bounds every budget field, so sums in Check cannot overflow and
// the numbers survive RFC 8785 (IEEE 754 doubles) exactly.
const MaxBudget = 1 << 50

// Spec is the declarative form of a capability, as policies, envelopes and
// leases state it. Empty Allow allows no path; there is no implicit "**".
type Spec struct {
	MaxClass Class    `json:"max_class"`
	Grants   []Grant  `json:"grants"`
	Allow    []string `json:"allow"`
	Forbid   []string `json:"forbid"`
	Budget   Budget   `json:"budget"`
	// Lift names default forbid rules (DefaultForbids) this spec lifts.
	// A lease lifts a rule only when every input does.
	Lift []string `json:"lift,omitempty"`
}

// Capability is a compiled, immutable Spec or an intersection of them.
// Its fields are unexported so every Capability in the kernel came from
// Compile, Intersect or Mint, and its globs were checked once. The zero
// value allows nothing.
type Capability struct {
	ok       bool
	maxClass Class
	grants   []Grant  // sorted by (Target, Kind), unique, each ≤ maxClass
	allow    [][]glob // CNF: a path must match some glob of every clause
	forbid   []glob   // a path matching any of these (folded) is refused
	budget   Budget
	lifted   lifts // default rules lifted by every input
}

// Compile checks a Spec and compiles its globs.
func Compile(s Spec) (Capability, error) {
	if s.MaxClass > MaxClass {
		return Capability{}, fmt.Errorf("max_class %d above %d", s.MaxClass, MaxClass)
	}
	if len(s.Grants) > MaxGrants || len(s.Allow) > MaxGlobs || len(s.Forbid) > MaxGlobs {
		return Capability{}, fmt.Errorf("too many grants or globs")
	}
	b := s.Budget
	for _, v := range []int64{b.BytesPerEffect, b.BytesTotal, b.EffectsPerMinute} {
		if v < 0 || v > MaxBudget {
			return Capability{}, fmt.Errorf("budget value %d outside 0..%d", v, int64(MaxBudget))
		}
	}
	lifted, err := parseLifts(s.Lift)
	if err != nil {
		return Capability{}, err
	}
	c := Capability{ok: true, maxClass: s.MaxClass, budget: b, lifted: lifted}
	for _, g := range s.Grants {
		if !validName(g.Target) || !validName(g.Kind) {
			return Capability{}, fmt.Errorf("grant names an invalid target or kind")
		}
		if g.MaxClass < ClassObservable || g.MaxClass > MaxClass {
			return Capability{}, fmt.Errorf("grant %s/%s: max_class %d is not a brokered class", g.Target, g.Kind, g.MaxClass)
		}
		g.MaxClass = min(g.MaxClass, s.MaxClass)
		if len(g.Refs) > MaxGrantRefs {
			return Capability{}, fmt.Errorf("grant %s/%s: more than %d refs", g.Target, g.Kind, MaxGrantRefs)
		}
		for _, r := range g.Refs {
			if !validRef(r) {
				return Capability{}, fmt.Errorf("grant %s/%s: %q is not a full ref name", g.Target, g.Kind, r)
			}
		}
		if len(g.Refs) == 0 {
			g.Refs = nil
		} else {
			g.Refs = slices.Compact(slices.Sorted(slices.Values(g.Refs)))
		}
		c.grants = append(c.grants, g)
	}
	slices.SortFunc(c.grants, cmpGrant)
	for i := 1; i < len(c.grants); i++ {
		if cmpGrant(c.grants[i-1], c.grants[i]) == 0 {
			return Capability{}, fmt.Errorf("grant %s/%s appears twice", c.grants[i].Target, c.grants[i].Kind)
		}
	}
	clause := make([]glob, 0, len(s.Allow))
	for _, a := range s.Allow {
		g, err := compileAllow(a)
		if err != nil {
			return Capability{}, fmt.Errorf("allow: %w", err)
		}
		clause = append(clause, g)
	}
	c.allow = [][]glob{clause}
	for _, f := range s.Forbid {
		g, err := compileForbid(f)
		if err != nil {
			return Capability{}, fmt.Errorf("forbid: %w", err)
		}
		c.forbid = appendGlobs(c.forbid, []glob{g})
	}
	c.forbid = appendGlobs(c.forbid, defaultForbids(lifted))
	return c, nil
}

// MustCompile is Compile for specs fixed in code and tests.
func MustCompile(s Spec) Capability {
	c, err := Compile(s)
	if err != nil {
		panic(err)
	}
	return c
}

func cmpGrant(a, b Grant) int {
	return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.Kind, b.Kind))
}

// validName: the shape protocol.ValidTargetID and ValidKind admit, checked
// here without a regexp so Compile stays cheap and this package stays a leaf.
func validName(s string) bool {
	if s == "" || len(s) > maxTargetIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || (i > 0 && (c == '_' || c == '-'))) {
			return false
		}
	}
	return true
}

// Intersect returns the capability allowed by every input: the lowest class,
// the grants present in all (each at its lowest class), every allow clause
// and every forbid of every input, the smallest budgets. With no inputs it
// returns the zero Capability, which allows nothing.
func Intersect(caps ...Capability) Capability {
	if len(caps) == 0 {
		return Capability{}
	}
	for _, c := range caps {
		if !c.ok {
			return Capability{}
		}
	}
	out := caps[0].clone()
	for _, c := range caps[1:] {
		out.maxClass = min(out.maxClass, c.maxClass)
		out.grants = intersectGrants(out.grants, c.grants)
		out.allow = appendClauses(out.allow, c.allow)
		out.forbid = appendGlobs(out.forbid, c.forbid)
		out.lifted &= c.lifted
		out.budget = Budget{
			BytesPerEffect:   min(out.budget.BytesPerEffect, c.budget.BytesPerEffect),
			BytesTotal:       min(out.budget.BytesTotal, c.budget.BytesTotal),
			EffectsPerMinute: min(out.budget.EffectsPerMinute, c.budget.EffectsPerMinute),
		}
	}
	out.clampGrants()
	if len(out.allow) > MaxClauses {
		// More clauses than Check is budgeted for: keep the first
		// MaxClauses-1 and an empty (allow-nothing) clause, which is
		// narrower than the exact answer and so still a valid intersection.
		out.allow = append(out.allow[:MaxClauses-1:MaxClauses-1], []glob{})
	}
	if len(out.forbid) > 4*MaxGlobs {
		// Too many forbids to check in bounded time: allow no path at all.
		out.allow = [][]glob{{}}
		out.forbid = nil
	}
	return out
}

// Mint is the lease rule (ARCHITECTURE §6, issue 6 §3): the intersection of
// the signed policy, the hard envelope and the regulator's current class
// ceiling.
func Mint(policy, envelope Capability, ceiling Class) Capability {
	return Intersect(policy, envelope).Narrow(ceiling)
}

// Narrow returns c with its class ceiling lowered to at most ceiling.
func (c Capability) Narrow(ceiling Class) Capability {
	if !c.ok {
		return Capability{}
	}
	out := c.clone()
	out.maxClass = min(out.maxClass, ceiling)
	out.clampGrants()
	return out
}

// clampGrants drops grants the class ceiling no longer reaches.
func (c *Capability) clampGrants() {
	c.grants = slices.DeleteFunc(c.grants, func(g Grant) bool { return c.maxClass < ClassObservable })
	for i := range c.grants {
		c.grants[i].MaxClass = min(c.grants[i].MaxClass, c.maxClass)
	}
}

func (c Capability) clone() Capability {
	c.grants = slices.Clone(c.grants)
	c.allow = slices.Clone(c.allow)
	c.forbid = slices.Clone(c.forbid)
	return c
}

func intersectGrants(a, b []Grant) []Grant {
	var out []Grant
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch cmpGrant(a[i], b[j]) {
		case -1:
			i++
		case 1:
			j++
		default:
			g := a[i]
			g.MaxClass = min(a[i].MaxClass, b[j].MaxClass)
			switch {
			case a[i].Refs == nil:
				g.Refs = b[j].Refs
			case b[j].Refs != nil:
				g.Refs = nil
				for _, r := range a[i].Refs {
					if slices.Contains(b[j].Refs, r) {
						g.Refs = append(g.Refs, r)
					}
				}
				if g.Refs == nil {
					// Disjoint refs: no ref is granted by both, so the
					// grant is in neither's intersection.
					i++
					j++
					continue
				}
			}
			out = append(out, g)
			i++
			j++
		}
	}
	return out
}

// appendClauses adds b's clauses to a, skipping clauses a already has, so
// intersecting a capability with itself does not grow it.
func appendClauses(a, b [][]glob) [][]glob {
	for _, cb := range b {
		if !slices.ContainsFunc(a, func(ca []glob) bool { return sameGlobs(ca, cb) }) {
			a = append(a, cb)
		}
	}
	return a
}

func appendGlobs(a, b []glob) []glob {
	for _, g := range b {
		if !slices.ContainsFunc(a, func(x glob) bool { return x.String() == g.String() }) {
			a = append(a, g)
		}
	}
	return a
}

func sameGlobs(a, b []glob) bool {
	return slices.EqualFunc(a, b, func(x, y glob) bool { return x.String() == y.String() })
}

// MaxClass is the highest class c allows at all.
func (c Capability) MaxClass() Class { return c.maxClass }

// Valid reports whether c came from Compile, Intersect or Mint (the zero
// Capability is not valid and allows nothing).
func (c Capability) Valid() bool { return c.ok }

// Description is a Capability in recordable form: what a lease row stores
// and an operator reads. Allow is the CNF: one list per intersected input.
type Description struct {
	MaxClass Class      `json:"max_class"`
	Grants   []Grant    `json:"grants"`
	Allow    [][]string `json:"allow"`
	Forbid   []string   `json:"forbid"`
	Budget   Budget     `json:"budget"`
	Lift     []string   `json:"lift,omitempty"`
}

// Describe returns c in recordable form. The zero Capability describes
// itself as allowing no path and no class above 0.
func (c Capability) Describe() Description {
	d := Description{MaxClass: c.maxClass, Grants: slices.Clone(c.grants), Budget: c.budget,
		Allow: [][]string{}, Forbid: []string{}}
	if d.Grants == nil {
		d.Grants = []Grant{}
	}
	if !c.ok {
		d.Allow = [][]string{{}}
		return d
	}
	for _, clause := range c.allow {
		srcs := make([]string, 0, len(clause))
		for _, g := range clause {
			srcs = append(srcs, g.String())
		}
		d.Allow = append(d.Allow, srcs)
	}
	for _, g := range c.forbid {
		d.Forbid = append(d.Forbid, g.String())
	}
	d.Lift = c.lifted.names()
	return d
}
