// Package agent loads the declarative profiles of the coding agent CLIs a
// domain can run (profiles/<name>.json: Codex, Claude Code, opencode) and
// renders a profile and a task into the worker's argv.
//
// Invariants:
//
//   - A profile is data, never code: strict JSON (unknown fields, duplicate
//     keys, case-folded keys, trailing data and bad values are typed errors,
//     see errors.go), validated as a whole before anything uses it.
//   - The rendered argv always starts with the rootfs's autonomic-entry and
//     bridges 127.0.0.1:8787 to /run/autonomic/inference.sock: an agent
//     reaches its model through the relay's socket and nothing else. The
//     profile names the base URL, which must be that bridge. Only
//     WithEgress adds a second bridge, 127.0.0.1:8788 to
//     /run/autonomic/egress.sock, with the proxy variables of EgressEnv
//     (NO_PROXY keeps the model calls off the proxy); a profile cannot set
//     those variables itself.
//   - The task is one argv element after "--", never parsed by a shell or as
//     a flag. Home files are relative to the worker's HOME (no "..", no
//     absolute path). A profile cannot set HOME.
//   - A profile carries a placeholder key only; the real credential lives in
//     the relay. Nothing here reads the kernel's environment.
package agent
