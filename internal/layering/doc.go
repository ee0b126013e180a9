// Package layering holds the test that enforces the dependency direction of
// ARCHITECTURE.md §1 by reading every package's imports. It has no code.
package layering
