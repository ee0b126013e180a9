// Package floor is the mandatory seccomp filter the launcher installs under
// every domain, in addition to the request's own program.
//
// Invariant: the floor is data generated from seccomp/profiles/floor.json
// (go generate; never edit floor_gen.go by hand) and can only refuse or kill:
// its default is ALLOW, so stacked under any profile it subtracts and never
// widens, because the kernel runs every installed filter and takes the most
// restrictive answer. It kills every non-native architecture and the x32 ABI
// (__X32_SYSCALL_BIT); answers ENOSYS to every native syscall above the range
// it was reviewed against (floorgen.ReviewedThrough, 466), so open_tree_attr
// and whatever the kernel adds next never reach it unseen; refuses the mount,
// namespace, chroot, tracing, BPF, perf, keyring, io_uring, userfaultfd,
// module, kexec, LDT and other host-level calls with EPERM; refuses clone
// with any CLONE_NEW* flag; answers clone3 with ENOSYS (its flags are behind
// a pointer seccomp cannot read, so libc falls back to clone); allows
// personality only as the query; answers socket and socketpair with
// EAFNOSUPPORT for every family but AF_UNIX, AF_INET and AF_INET6 (those two
// stay so that a profile can notify them: a floor refusal would outrank the
// notification); and refuses ioctl TIOCSTI/TIOCLINUX compared on the low 32
// bits. Program returns a fresh slice on every call and the package holds no
// mutable state. It imports only the standard library and x/sys/unix.
package floor

//go:generate go run ../../../seccomp/internal/genfloor -profile ../../../seccomp/profiles/floor.json -out floor_gen.go
