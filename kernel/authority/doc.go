// Package authority is the kernel's authority algebra: capabilities, the
// lease that is their intersection, the hot-path capability check, and the
// precedence lattice that turns a set of signals into one verdict.
//
// Invariants:
//   - A lease is never wider than any of its inputs. Mint intersects policy,
//     hard envelope and the regulator's class ceiling; Intersect keeps every
//     input's path clauses and forbids, the lowest class, the common grants
//     and the smallest budgets. The zero Capability allows nothing.
//   - Precedence is a lattice, not a vote: Kernel Denial ≻ Capability
//     Violation ≻ Deterministic Invariant ≻ Signed Policy ≻ Human Authority ≻
//     Semantic Observation. Negative signals join (the most severe wins), so
//     no signal, whatever its source, cancels another's contraction. Only
//     Signed Policy and Human Authority may grant (authorise a commit or a
//     bounded expansion), and a grant stands only when nothing objects.
//   - Semantic observation can narrow, yield or preempt; it can never grant,
//     revoke on its own authority, or widen a lease: Effective(lease, v) is
//     always within lease.
//   - Check is pure and allocation-free for paths already in folded form
//     (one folded copy otherwise): it is called on every brokered request
//     and every path of every patch. Paths match through the one glob
//     matcher, protocol/pathglob; forbids compare folded (NFKC, case
//     folded); names with control or invisible code points are refused.
//   - Every capability forbids the default rules (.gitattributes,
//     .gitmodules, CI configuration, executable bits) unless its spec lifts
//     them; a lease lifts one only when every input does.
//   - CheckCommit is what the commit horizon asks of the lease document:
//     the lease as the current verdict leaves it, the effect, each path it
//     changes, and the durable spend.
//
// Decide and Check are pure functions. Nothing here reads a clock, a file or
// the network; callers pass what they observed.
package authority
