// Package verify is the verification runner: the slow, pre-commit check of
// a class 3 or 4 effect, by its kind's rule (Rule): a git_commit by tests,
// a kind the configuration names in unverified_kinds by none, any other
// kind denied with a reason naming it. For a git_commit it replays the
// effect's exact patch on its exact base OID in a fresh workspace clone
// the kernel prepares, runs
// the target's verify_argv (trusted configuration, never the worker's)
// inside a separate one-shot domain under the worker seccomp profile, and
// returns a verdict for the broker to record against the effect's revision
// and epoch.
//
// Invariants:
//   - The verification domain never sees the worker's upper layer: its
//     lower layer is a new clone of the authoritative repository at the
//     effect's base, and the only change is the effect's payload, applied
//     by git with every repository-configurable execution path off.
//   - It has no broker socket: verification holds no authority. It has no
//     network either, except when the effect's episode had an egress
//     proxy under the agent profile (Egress, from the episode controller):
//     then its tests fetch their dependencies through a proxy of its own
//     under the episode's signed allow list — recorded in the episode's
//     fetch ledger, charged to its cap, served from the host's cache —
//     in the episode's rootfs under the episode's seccomp program, never
//     with more than the worker itself had. The proxy stops, its fetches
//     recorded, before the verdict is returned.
//   - Whatever the outcome, the domain is destroyed and an inspect proves
//     it gone, and the clone is removed, before Verify returns; a domain
//     that cannot be proven gone is an error, never an allow.
//   - Anything wrong with the effect (an unknown kind or target, a base or
//     patch that does not apply, a failing or violating or overrunning
//     verify_argv) is a deny verdict; only a kernel-side failure is an
//     error, and an error never lets the effect commit (the broker requires
//     an allow decision bound to the revision).
//   - The decision body carries digests and exit status, never the verify
//     output itself, which the patch under test controls.
package verify
