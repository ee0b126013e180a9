// Command autonomic-launcher is Autonomic's only root code. This package is
// what runs as host root; what needs no host root is in launcher/internal,
// one package per privilege (docs/LAUNCHER.md, "Privilege map"). It is reached
// through one exact sudoers rule, reads one request from standard input,
// acts, answers on standard output, and exits — except create, which stays
// as the domain's monitor until the worker exits.
//
// Invariants:
//   - It holds no policy. Every host path, uid range and limit comes from its
//     root-owned configuration; a request only names validated ids, so a
//     compromised kernel cannot make it touch a host path of its choosing.
//   - Every host path it opens on a request's behalf is resolved beneath a
//     configured root without following symlinks, and mounted through the
//     descriptor, never re-resolved by name.
//   - Nothing is acted on before the request is admitted (protocol package);
//     every error it reports is a code from the closed catalogue.
//   - A domain's processes are born in its cgroup and die with it: destroy
//     proves the cgroup empty before deleting anything or freeing its uid
//     range, and stops at any failure; the monitor's death (or the
//     kernel's) kills the domain. The launcher acts only on the cgroup it
//     recorded making, never on a same-named one it did not.
//   - A rootfs is used only if its manifest has the configured digest and
//     its tree matches that manifest (checked in full once per boot).
//   - The tar code of checkpoint and restore, which reads and writes what a
//     hostile worker made, never runs as host root: a helper holding only
//     the domain's ids does (checkpoint.go); root keeps the store and the
//     digest.
//   - import reads only <workspaces_root>/imports/<digest>.tar, and only if
//     it is the kernel's own regular file with one link on that root's
//     mount; it stores the bytes it copied, and only under the digest they
//     hash to, and never changes or removes the kernel's file.
//   - The worker starts with no capabilities, no_new_privs, a new session,
//     descriptors 0-2 only, an allowlisted environment, the mandatory
//     seccomp floor and the requested profile; it never runs a shell string.
//
// Read in this order: main.go (dispatch), config.go and paths.go (where
// every host path comes from and how it is opened), resolve.go and
// create.go (the create path, in the order it runs), channel.go (how the
// monitor, init and stage talk), init.go (the domain's PID 1), stage.go (the
// last step before the worker's execve), monitor.go and notify.go (the
// monitor's life), lifecycle.go, cgroup.go, state.go, checkpoint.go,
// import.go, preflight.go.
package main
