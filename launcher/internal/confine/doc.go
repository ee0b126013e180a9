// Package confine takes privilege away: capability sets on every thread,
// no_new_privs, seccomp filters, and the host's seccomp actions.
//
// Privilege: none of its own; it only ever narrows what its caller holds.
// Used by the domain's init and stage, the notifier and the checkpoint
// helper.
package confine
