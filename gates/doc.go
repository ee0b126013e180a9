// Package gates holds Autonomic's acceptance gates: end-to-end tests that
// compose the real launcher, real domains, a real PostgreSQL and the real
// broker. A gate that an earlier package already proves runs there; what is
// here is what only the whole system can show.
//
// Invariant: no gate mocks a component it can run, and none skips silently
// (AUTONOMIC_REQUIRE_PRIVILEGED=1 turns every skip into a failure).
package gates
