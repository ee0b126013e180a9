// Package homeostat tracks an episode's trajectory: smoothed drift,
// volatility, uncertainty and pressure, and the regime they put it in
// (stable → uncertain → drifting → unstable → containment).
//
// Invariants:
//   - Deterministic: the state is a function of the configuration and the
//     sequence of samples alone. There is no clock inside; time is a field
//     of each sample, and a sample from the past is refused without effect.
//   - Contraction is fast, expansion slow: a rising score moves to the
//     regime it reaches at once (skipping regimes if it must); a falling
//     score leaves a regime one step at a time, only once it is below the
//     entry threshold by the hysteresis margin and the regime has been held
//     for the minimum dwell time.
//   - A kernel denial (seccomp violation, forbidden-path write) bypasses
//     smoothing and contains at once.
//   - Containment is final: no sample leaves it. Only Reset, which the
//     repair path calls after restoring a verified checkpoint, does.
//   - Bad readings fail towards caution: a NaN or infinite value reads as
//     1 (the worst), values are clamped to [0, 1].
//
// A Homeostat is not safe for concurrent use; the episode's control loop
// owns it.
package homeostat
