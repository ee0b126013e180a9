// Package gitref says which branch names the kernel lets an effect create
// under an operator's allowed prefix (autonomic run's one branch per run).
//
// Invariant: a tail Tail accepts is a ref name git accepts
// (git check-ref-format) and one no shell, terminal or path join can
// misread — 1 to 4 components of ASCII letters, digits, '.', '_' and '-',
// none starting with '.' or '-', none ending in ".lock" or '.', no "..",
// each at most 64 bytes. FuzzTail holds it against git itself.
package gitref
