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
//   - An environment (a spec's "oci" or "debian") is the base a rootfs is
//     built on, and the host contributes nothing else to it but the spec's
//     npm files and --add files. An OCI image is hostile input: pinned by
//     its manifest digest, every layer read under the chain pin → manifest
//     → config → diff_id (each layer's uncompressed bytes hashed as they
//     are read), parsed in memory with each file's bytes copied to a file
//     of the builder's — never extracted to a path the image chose — and
//     refused whole for a device node, FIFO, unknown member type, a ".."
//     name, an entry beneath a symlink or file, a hard link to anything but
//     a regular file already unpacked, or any bound (entries, bytes, file
//     size, layers) exceeded. Whiteouts and opaque directories apply to
//     the layers below, as container runtimes apply them; setuid/setgid
//     are dropped and ownership is root's as for every rootfs. A Debian
//     environment is mmdebstrap's minbase plus named packages, in unshare
//     mode (maintainer scripts never run with the host's root), its
//     Release files checked against the Debian archive keyring. Either
//     way the builder's paths win (mountpoints empty, generated /etc
//     identity) and the denylist holds: an environment's denied paths
//     (/etc/shadow, /root) are left out with a note, and the manifest
//     records the image digest or every installed Debian package.
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
