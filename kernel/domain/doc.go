// Package domain is the kernel's view of execution domains: the
// ExecutionDomain interface and its backends.
//
// Invariants:
//   - The Linux backend never acts on a domain itself. Every request is one
//     launcher process (through `sudo -n`, or directly when the kernel
//     already holds the privilege), one validated request frame in, strictly
//     admitted frames out; anything else from the launcher is an error.
//   - A running domain is tied to the launcher's standard input: closing a
//     Running (or the kernel dying) kills the domain.
//   - The launcher is never given a terminal: worker output arrives on a
//     pipe and is kept bounded, never logged.
//   - UnsafeLocal isolates nothing, and says so in its name, in every log
//     line, in every event it emits and in its Features. It cannot
//     checkpoint or import, and refuses a spec that asks it to restore one.
//   - An import names only a digest, never a path: the launcher reads
//     ImportPath under its own configured workspaces root and stores only
//     bytes that hash to that digest.
//   - A backend's Features are its promises; a consumer reads them instead
//     of calling what the backend cannot do.
package domain
