// Package testbed installs a real launcher into a temporary directory for
// tests: a static launcher binary whose configuration path is baked in at
// build time, a root-owned configuration, a rootfs built by
// autonomic-rootfs, a workspaces root and a private cgroup parent.
//
// Invariant: a testbed touches nothing of the host outside its own temp
// directory and its own cgroup under the cgroup v2 mount, and Close removes
// both. It never touches a cgroup v1 hierarchy.
//
// Where no Go toolchain is (the host matrix's guests), $AUTONOMIC_TESTBED_PREBUILT
// names the static binaries to install instead of building them, and
// $AUTONOMIC_MODULE_ROOT the source tree (specs, sudoers rule).
package testbed
