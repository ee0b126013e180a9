// Package targets is the kernel's live set of git_commit targets: those of
// its configuration, and those an operator registered while it runs
// (`autonomic repo add`), persisted under state_dir and read back at
// start, so a repository is onboarded without editing the configuration or
// restarting the kernel.
//
// Invariants:
//   - A registered target passes the configuration's own validation
//     (config.CheckGitCommitTarget) before anything holds it, and its id
//     never replaces a configured one or an earlier registration.
//   - The repository a target names is the kernel's: its git dir is owned
//     by the kernel's account (git refuses a repository another account
//     owns, and the kernel writes its refs). A repository it does not own
//     is cloned bare into state_dir/repos — no hardlink, template, hook or
//     configuration of the source carried over or run — and the copy is
//     the target; the operator fetches the agents' branches from it.
//   - What a registration learns from the repository (its test command) is
//     read by git under the workspace safety settings: no hook, filter or
//     configuration of the repository runs.
//   - The file is written whole (temporary file, fsync, rename) by the
//     kernel's account, mode 0600; a file that does not parse, or holds a
//     target that does not validate, stops the kernel at start rather than
//     being half-read.
package targets
