// Package floorgen renders the launcher's floor filter as Go source.
//
// Invariant: the output is a pure function of the floor profile's bytes and
// the libseccomp version, and the rendered file imports only the standard
// library and golang.org/x/sys/unix, so the launcher stays CGO_ENABLED=0 and
// never links the compiler.
package floorgen
