// Package source says which tree a report speaks for: the commit checked
// out, a digest of every tracked file's path and content, and whether the
// work tree differs from the commit. The conformance report (gates/cmd/qc)
// and the host matrix (hosts) both bind their results to it, so a result
// of one tree can never be read as another's.
//
// Invariant: anything git cannot answer counts against the tree — a
// failing `git status` is a dirty tree, never a clean one.
package source
