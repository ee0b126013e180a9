// Package protocol is the wire contract between the kernel and the root
// launcher, and between a worker and the effect broker.
//
// Invariant: nothing is acted on before it has been admitted. A frame is
// bounded in size before it is read, its JSON is checked for UTF-8, duplicate
// keys, depth, node count and trailing bytes before it is decoded, its
// protocol version and action are checked before its fields, and its fields
// are checked against the exact set its action allows, at every depth and
// byte for byte (encoding/json's case-insensitive matching is never relied
// on). Every failure is a
// code from the one closed catalogue in errors.go; no Go error string, path
// or peer-supplied text ever crosses the wire as an error.
//
// This package imports nothing of ours, so both the launcher and the kernel
// can depend on it without depending on each other. README.md beside this
// file is the normative specification.
package protocol
