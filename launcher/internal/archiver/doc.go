// Package archiver is the checkpoint helper (autonomic-checkpoint): the tar
// code that archives a domain's frozen upper layer and restores one.
//
// Privilege: none on the host. It runs as the domain's first host uid, in
// user, mount, pid, IPC, UTS, cgroup and an empty network namespace of its
// own; in its user namespace it keeps only chown, dac_override,
// dac_read_search and fowner, with no_new_privs, under the seccomp floor
// and limits of its own (Run confines it before it reads a byte). It gets
// the upper layer and the archive as descriptors and never resolves a host
// path. It must never import a package that mounts, maps ids or writes a
// cgroup.
package archiver
