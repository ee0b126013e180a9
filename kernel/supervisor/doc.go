// Package supervisor runs an episode's parts with rest-for-one semantics:
// children start in order, each may depend on every child before it, and
// when one ends, every child after it is stopped (last first) before the
// supervisor reports why.
//
// Invariants:
//   - A child never outlives a child it depends on: when child i ends, for
//     whatever reason, children i+1..n are cancelled and waited for, in
//     reverse order of start, before child i's predecessors hear of it.
//     So a domain listed after the authority and the broker never runs
//     against a dead authority.
//   - A child starts only after every child before it reported ready.
//   - The supervisor restarts nothing itself: what to do after a failure
//     (repair, suspend, contain) is a decision of authority, which the
//     caller owns.
package supervisor
