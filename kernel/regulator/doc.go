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
//   - One home: the kernel has one Live regulator, built before the
//     governor and the episode controller and handed to both (serve
//     composes it). Live locks the Regulator, keeps the union of the
//     faults each source last reported (Report: a source's report speaks
//     only for its own faults, so one source's health never hides
//     another's degradation), and is what every lease mint and commit
//     check reads (State). Its sources are the sensor bank at evaluate
//     (the governor) and the HealthLoop (store reachability and broker
//     saturation, one report per interval, so recovery counts intervals).
//
// A bare Regulator is not safe for concurrent use; Live is.
package regulator
