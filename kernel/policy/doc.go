// Package policy admits signed policies: JSON documents signed with Ed25519
// over "autonomic.policy.v1\n" followed by the document's RFC 8785
// canonical form, by a key named in the configured policy_keys set.
//
// Invariants:
//   - Nothing unsigned, wrongly signed, signed by an unknown key, malformed
//     or invalid becomes a Policy. Every refusal is a typed error (a
//     Refusal, and a protocol catalogue code for anything that crosses a
//     boundary) and changes nothing.
//   - The signature is checked before the document is decoded into any Go
//     type: unauthenticated bytes only ever meet the shape check (size,
//     UTF-8, depth, node count, duplicate keys) and the canonicaliser.
//   - Decoding is strict: duplicate keys, unknown fields and missing
//     required fields are refused at every depth, so the bytes that were
//     signed and the Policy that is used mean the same thing.
//   - A policy's version only moves forward: Supersedes refuses a rollback,
//     a different policy id, and a reused version with different content.
//   - Egress is granted only by a policy's egress block (egress.go), host
//     by exact name; a policy without one grants no egress.
//
// This package holds no keys and reads no files: callers pass the key set
// from configuration.
package policy
