// Package seccomp compiles declarative seccomp profiles to BPF.
//
// Profiles are JSON in the OCI runtime-spec LinuxSeccomp shape as runc, crun
// and Docker (moby/profiles) write it: defaultAction, defaultErrnoRet,
// architectures or moby's archMap, flags, and syscalls[] with names (or the
// deprecated name), action, errnoRet, args{index,value,valueTwo,op}, comment
// and moby's includes/excludes.
//
// Invariants:
//
//   - Parsing is strict. An unknown or duplicate key (keys compare exactly), an
//     unknown syscall name, action, operator, architecture, flag or capability,
//     an argument index outside 0..5, two comparisons of one argument in a rule
//     (libseccomp cannot AND them; runc silently ORs them), a masked-equal datum
//     outside its mask and trailing data are errors that name the rule. Nothing
//     is dropped silently.
//   - A Profile is a value and Compile is a pure function of (Profile, Options,
//     libseccomp version): byte-identical output for identical input, with its
//     SHA-256 over the raw little-endian struct sock_filter array.
//   - Compile never produces a program in which a rule of the profile cannot
//     take effect: after compiling it runs the program on inputs each rule
//     matches and fails with ErrShadowed if some rule decides none of them
//     (libseccomp otherwise lets an unconditional rule swallow conditional ones
//     for the same syscall without a word).
//   - The program covers the native architecture (plus any the profile lists);
//     a syscall from any other architecture, including x32 on x86_64, kills the
//     process. Syscalls are dispatched through libseccomp's binary tree
//     (SCMP_FLTATR_CTL_OPTIMIZE=2) when the library supports it (2.5+).
//   - With a restrictive default action, a native syscall numbered above every
//     syscall the profile names answers ENOSYS instead of the default, as runc
//     does, so that libc falls back from calls newer than the profile (clone3
//     is refused with ENOSYS explicitly for the same reason). This is a short
//     stub prepended to libseccomp's output; classic-BPF jumps are relative and
//     forward, so prepending cannot change libseccomp's code.
//
// Decisions:
//
//   - Capability conditions in includes/excludes always evaluate as "no
//     capabilities held": workers run with none. A rule that includes a
//     capability is never selected; a capability in excludes never excludes.
//   - Architecture conditions use moby's native names ("amd64", "x86") and are
//     evaluated against the native architecture. minKernel is evaluated against
//     Options.Kernel; an unknown kernel counts as older than every minKernel.
//   - errnoRet defaults to EPERM; it is accepted only for SCMP_ACT_ERRNO and
//     SCMP_ACT_TRACE. SECCOMP_FILTER_FLAG_SPEC_ALLOW is refused. listenerPath
//     and listenerMetadata are not accepted: the launcher owns the listener.
//   - Options.NotifyUnsupported lowers SCMP_ACT_NOTIFY to SCMP_ACT_KILL_PROCESS
//     for hosts without user notification; a SIGSYS trap would be catchable.
//   - libseccomp 2.5.4 has no in-memory export, so the program is exported
//     through a memfd and read back.
//
// The package is the compiler the kernel uses; the launcher never imports it
// (it is cgo). The launcher's floor is generated from profiles/floor.json into
// launcher/internal/floor by seccomp/internal/genfloor.
//
// This package must never load a filter into the calling process outside
// tests, and holds no package-level mutable state.
package seccomp
