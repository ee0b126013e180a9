// Package privileged decides whether a test that needs root may run.
//
// Invariant: when AUTONOMIC_REQUIRE_PRIVILEGED=1 (CI sets it), a test that
// needs root never skips: it fails, so a green run proves the containment
// tests actually ran.
package privileged
