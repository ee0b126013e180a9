// Package governor is the home of the fast and slow control loops
// (ARCHITECTURE §6). It owns one trajectory Record per episode it watches —
// the bounded sensor queue, the homeostat, the history the sensors read and
// the last slow-loop contraction — and is what the broker consults: its
// Trajectory, CheckLease and Evaluate are the broker's Trajectory, LeaseCheck
// and Verifier, and the adapters it Wraps tell it of every commit.
//
// Invariants:
//   - It never drives an episode and never imports the episode controller:
//     what it knows of one (intent, scope, max_risk, epoch, lease) and the
//     one thing it asks of one (Contain, a repair of an epoch) are given to
//     Open by the controller. The layering test enforces the direction.
//   - Fast: the monitor's violations are critical frames on the episode's
//     bounded sensor queue (never dropped; a queue full of critical frames
//     is reported to the caller, which contains at once), folded by the
//     watch child (Record.Watch) into the homeostat, which contains without
//     smoothing; containment is reported through Contain. A frame of an
//     older epoch describes a destroyed generation and is ignored.
//   - Slow: at evaluate (Evaluate, the broker's Verifier with or without
//     automatic_verification), after verification has run (whatever its
//     verdict; with it off, a recorded verification says none ran and the
//     effect reads as exempt from tests), the sensor bank (Rules always, Config.Sensor when set)
//     reads the effect's patch, paths and the episode's real history — each
//     edit with its size, each verification's result, violations, the
//     lease's and the bank's refusals, commits, and the repairs, which
//     outlive the generation they ended (Record.Reset) while everything
//     else starts afresh; authority.Decide weighs it with the lease's
//     capability check of every path, the homeostat's regime and the
//     regulator's level, and the verdict is recorded as a semantic decision
//     with every reading's identity, bound to the effect's revision and
//     epoch. The commit check requires every bound decision to allow, so a
//     semantic deny stops the commit. Semantic input only narrows: the
//     effect may commit only if authority.Effective(lease, verdict) — never
//     wider than the lease — allows its class and every path; a patch path
//     it cannot read is a denial. A patch that writes a path the lease
//     forbids (a forbid glob) is a kernel denial too: once the evaluation's
//     decisions are recorded it is a critical frame, and the episode is
//     contained at once whatever the evidence said.
//   - semantic.max_risk decides: a reading above it narrows to class 2, and
//     the narrowing (like a Throttle) holds at the commit horizon until the
//     next evaluation.
//   - A degraded reading is never safe: it narrows below class 3 in Decide
//     and is reported to the regulator as a fault; it is not trajectory
//     evidence, so an outage lowers autonomy without containing episodes.
//   - The regime the broker sees is "regime" or "regime@level" (the
//     homeostat's, capped by the regulator's level), with RegimeMaxClass as
//     the broker's table; an episode the governor does not watch (not yet
//     opened, or closed) reads as containment, so nothing commits for it,
//     and a broker left with the default table refuses every qualified
//     regime.
package governor
