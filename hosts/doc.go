// Package hosts is the host matrix: the product proven on the hosts its
// users run, not only on the machine that builds it. Each guest is a
// Debian system built from Debian's packages (hosts/<guest>/: its package
// list, initramfs and boot unit; scripts/host_image.sh builds and caches
// the image by recipe digest) and booted under QEMU with Debian's own
// kernel (scripts/host_matrix.sh). In it Autonomic is installed the way a
// user installs it (provision_host.sh, install.sh, binaries built here),
// and hosts/guest/run.sh runs the test binaries of hosts/guest/plan and the
// reference scenario (scripts/demo.sh: `autonomic serve` as the service
// account, the launcher through sudo), ending with the main job:
// `autonomic run` with the real Codex CLI on an agents rootfs built on the
// matrix's host and carried in (the guest reaches no registry).
//
// Invariants:
//   - A guest's verdict comes only from what ran in it: its facts (kernel,
//     cgroup layout, root propagation), each step's exit status and each
//     test's PASS/FAIL/SKIP line. A step or test that did not run is never
//     passed, and a skip counts as a failure (the guests run under
//     AUTONOMIC_REQUIRE_PRIVILEGED=1).
//   - A limit counts as enforced in a guest only when its limits test ran
//     there, passed, and reported enforced: the started frame said so and
//     the worker was stopped at the limit.
//   - The cached image is never written by a run (runs boot a qcow2
//     overlay); a changed recipe builds a new image under a new digest.
//   - The main job counts as done in a guest only when demo.sh printed
//     "main job: landed", which it does once the run's commit is on its
//     ref, parented on the base and carrying a committed effect's trailer.
//   - TestHostMatrix skips, by name, only where QEMU or the image tools are
//     missing, and under AUTONOMIC_REQUIRE_PRIVILEGED=1 that skip fails.
//
// The matrix's results are written to artifacts/hosts.json, which the
// conformance report (gates/cmd/qc) reads for its hosts section.
package hosts
