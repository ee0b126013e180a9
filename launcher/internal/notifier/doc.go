// Package notifier is the domain's notifier (autonomic-notify): it answers
// every seccomp-notified call of the domain's worker, letting what stays in
// the domain continue and refusing the rest, reported.
//
// Privilege: the domain's root in the domain's user namespace with only
// CAP_SYS_PTRACE (to read a parked worker's memory), no_new_privs, in the
// domain's namespaces and its cgroup, so what a worker's calls cost is the
// domain's. Started by the domain's init; nothing here touches the host.
package notifier
