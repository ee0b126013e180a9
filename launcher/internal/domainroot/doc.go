// Package domainroot is what runs as a domain's root: the init (PID 1,
// autonomic-domain-init) and the worker's stage (autonomic-worker-stage).
//
// Privilege: the domain's root in the domain's own user namespace (its
// first host uid, nothing on the host), in the domain's mount, pid,
// network, IPC, UTS and cgroup namespaces and its cgroup. The init mounts
// inside its own mount namespace from descriptors the monitor prepared,
// pivots, starts the notifier and the stage, and then holds no capability
// (its bounding set is empty from its start). The stage nests a user and
// mount namespace (locking the domain's mounts), becomes the worker,
// installs the seccomp floor and profile and execs. No host path is
// resolved here; nothing here maps host ids or touches a host cgroup.
package domainroot
