// Package seccomptest provides profiles from the wider ecosystem for tests:
// Docker's default profile, converted to the format our parser admits.
//
// Invariant: nothing here is used outside tests; the kernel never ships a
// dependency on moby's profile package.
package seccomptest
