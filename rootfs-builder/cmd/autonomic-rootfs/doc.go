// Command autonomic-rootfs builds and verifies domain root filesystems.
//
//	autonomic-rootfs build --spec SPEC --dest DIR [--add SRC=DEST]... [--npm-cache DIR] [--quiet]
//	autonomic-rootfs build --spec SPEC --cache DIR [--add SRC=DEST]... [--npm-cache DIR] [--quiet]
//	autonomic-rootfs evict --cache DIR [--keep N] [--config FILE]... [--reference PATH]... [--dry-run]
//	autonomic-rootfs verify DIR
//	autonomic-rootfs digest DIR
//
// build prints the rootfs identity (the SHA-256 of manifest.json) as the only
// line on standard output (with --cache: the identity and the cached tree's
// path); progress and notes go to standard error. evict removes the cache
// entries no configuration names, not among the --keep newest and not
// mounted, and prints each removed path (with --dry-run: each it would
// remove); a configuration it cannot read removes nothing. verify
// exits 1 and lists every difference when a tree does not match its
// manifest.
//
// Invariant: this command adds no policy of its own; everything it refuses
// or admits is decided by package rootfs, so the CLI and Go callers build
// identical trees from identical inputs.
package main
