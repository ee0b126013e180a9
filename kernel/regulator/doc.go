// Package regulator is the system regulator: the kernel's autonomy level
// (observe, advise, act) and the highest effect class it lets a lease
// carry, as a function of the health of what autonomy depends on.
//
// Invariants:
//   - Degradation lowers autonomy at once and never proceeds silently:
//     semantic outage, a model outside the pinned set and broker
//     saturation cap the level at advise (no authoritative mutation without
//     trustworthy semantic evidence and a broker that can carry it);
//     database loss caps it at observe (no authoritative commit can happen
//     without the authority store). An unknown fault counts as the worst.
//   - Recovery is slow: one level at a time, each step only after N
//     consecutive observations in which the cap is above the current level,
//     spanning at least the configured duration. Any fault in between
//     restarts the count.
//   - Deterministic: the level is a function of the configuration and the
//     sequence of observations. Time is an input; an observation from the
//     past is refused without effect.
//   - The regulator starts at its configured start level (observe by
//     default): health is unknown until it has been observed.
//
// A Regulator is not safe for concurrent use; one control loop owns it.
package regulator
