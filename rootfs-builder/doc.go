// Package rootfs builds the read-only root filesystem a domain runs in, and
// verifies one against its manifest.
//
// Invariants:
//
//   - Nothing outside the spec's closure enters a rootfs: the named
//     executables, files, directories and symlinks, the ELF dependency
//     closure of every ELF object among them (PT_INTERP, DT_NEEDED resolved
//     through RPATH/RUNPATH and the Debian multiarch library directories),
//     the host symlinks traversed to reach them (so /lib64 -> usr/lib64 keeps
//     the interpreter path valid), the builder's own mountpoints
//     (/proc /dev /tmp /run /workspace, empty) and a handful of generated
//     /etc files. Explicit --add files are part of the spec's closure.
//   - Nothing on the denylist ever enters a rootfs (/etc/shadow, /root,
//     /home, ssh keys, *.pem/*.key holding a PRIVATE KEY, credential
//     stores). A denied path is an error that aborts the build, never a
//     silent skip; an optional entry does not make a denied path acceptable.
//   - A build is deterministic: sorted traversal, ownership normalised to
//     root:root (when built as root), modes kept minus setuid/setgid, fixed
//     mtimes. The same host and spec give byte-identical manifests.
//   - A rootfs's identity is the SHA-256 of its manifest.json bytes, which
//     stands for the tree only once the tree is proven to match it. The
//     manifest lists every path except itself (type, mode, owner, size,
//     SHA-256 of file content or of symlink target) in RFC 8785 canonical
//     form, sorted by path. Verify accepts a tree only if it matches its
//     manifest exactly; install runs it, and the launcher makes the same
//     check itself before a rootfs's first use in each boot.
//   - Cache eviction removes only what it can prove is unused: a
//     directory directly in the cache named like an entry, not a symlink
//     (never followed), named by no launcher configuration it was given
//     (one it cannot read aborts it), not among the most recently built
//     or served, and not the source of a mount in any running process's
//     mount namespace (a live domain's root).
//   - A failed build leaves nothing behind: the destination is removed (or
//     emptied again if it existed empty).
//
// Errors name host paths. This is an operator's build tool run on trusted
// input, so the path is the useful part of the message; these errors never
// cross the launcher or broker protocol.
package rootfs
