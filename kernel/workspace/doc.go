// Package workspace prepares an episode's workspace: a clone of the
// authoritative repository checked out at one exact base OID, which the
// launcher later mounts read-only as the lower layer of the domain's
// /workspace overlay.
//
// Invariants:
//   - No repository code runs on the host. Every git invocation runs with
//     hooks pointed at /dev/null, no templates (so no sample hooks are
//     copied), fsmonitor off, no system or global configuration, no
//     terminal prompts, and a fixed PATH; a clone never copies the source's
//     configuration, so no filter, textconv or credential helper the
//     repository names can be defined, and so none can run.
//   - The checkout is of the exact OID asked for, detached: a ref that
//     moves between the caller reading it and the clone cannot change what
//     the worker sees. The result is verified with rev-parse HEAD.
//   - The clone shares no inode with the authoritative repository
//     (--no-hardlinks): handing the clone to the workspace owner must never
//     change the owner of an authoritative object.
//   - A workspace is created under the configured root only, by id; an
//     existing directory is refused rather than reused, and a failed
//     preparation removes what it created.
package workspace
