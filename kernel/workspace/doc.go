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
//
// Harvest (change.go) turns a worker's change into a git patch against the
// base OID. It reads only the checkpoint archive of the worker's upper
// layer, never the live upper directory, and treats it as hostile:
//   - The archive is parsed in memory, never extracted: no entry is
//     created, opened, followed or executed on the host. Every byte read is
//     hashed, and bytes that are not the digest the launcher returned are
//     ErrDigest, whatever they hold. Archive size, entries, each file, all
//     kept files together and the patch are bounded; a header's size is
//     checked before anything is allocated for it, and a sparse map (a
//     PAX record the launcher never writes) is refused.
//   - A path the repository ignores is not part of the change, whatever it
//     is (npm's .bin symlinks in node_modules, __pycache__ binaries, build
//     output): git itself answers (one `git check-ignore --stdin`, in the
//     kernel's clone of the base, whose .gitignore files and index are the
//     base's; no global or system configuration), after a first pass that
//     only lists the archive's names; the second pass, digest-verified,
//     leaves them out before any other rule applies (Change.Ignored counts
//     them). Tracked paths are never ignored (git's rule), so deleting or
//     editing one is always a change. The worker's own edits to .gitignore
//     files do not widen what is ignored (the base's rules decide).
//   - A path with a .git component (any case) is not part of the change:
//     hooks, core.fsmonitor, includes, alternates, a gitdir file — the
//     worker's repository metadata stays behind, and no git ever runs in
//     the worker's tree (the commit is made in the authoritative
//     repository by the broker's git_commit adapter).
//   - Refused, the whole change with it (a *Refusal whose reason quotes no
//     worker-chosen name; its Path, escaped by Operator, is for the
//     operator's record only): a symlink (its target is never read, let alone
//     followed), a hard-link entry (the launcher stores each name of a
//     hard-linked file as its own regular file, which is harvested as
//     content), a FIFO, a device node (other than an overlay whiteout), any
//     other special file, a name that is not clean and relative, has
//     control or invisible characters, quotes, backslashes or invalid
//     UTF-8, a binary file (a NUL anywhere in it) unless the target admits
//     binary files (Admit.Binary: then a GIT binary patch with the full
//     index line git apply checks each preimage against), and a change to a
//     base symlink or submodule.
//   - Whiteouts and opaque directories delete the base paths they hide;
//     a copied-up file whose blob id (hashed here, in the base's object
//     format) and mode are the base's is no change, and does not count
//     against the changed-files cap. The base bytes a patch needs come from
//     one `git cat-file --batch`: the host cost is one git process per
//     harvest, not one per file (BenchmarkHarvest).
//   - The base side is read from the kernel's own clone (root/id) by git
//     under the same safety settings as Prepare.
package workspace
