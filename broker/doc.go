// Package broker is the effect broker: the one door through which a worker
// in an untrusted domain reaches the world. It serves the worker protocol
// (protocol/README.md §11) on one AF_UNIX socket per episode, walks every
// effect across the commit horizon through the authority store, and runs the
// reference adapters (artifact, git_commit, git_remote, http_read,
// http_mutation) with trusted configuration only.
//
// Invariants:
//
//   - A connection is bound to the episode's current domain generation by
//     the kernel's view of the peer (SO_PEERCRED, a pidfd — SO_PEERPIDFD, or
//     pidfd_open and the start time where the kernel lacks it — and the
//     peer's cgroup), never by anything a frame claims. It may carry
//     requests in sequence; each later one is served only while that
//     generation is still the bound one.
//   - Prepare is fenced first: a prepare refused for its epoch, its lease,
//     the lease's grant or the episode's quotas has applied no patch,
//     stored no payload and written no row. An admitted prepare stores its
//     payload while its transaction runs and answers prepared only when
//     both are done; an effect recorded whose payload was not stored is
//     aborted, and every read of a payload verifies its digest, so no
//     adapter acts on bytes other than the ones the effect names.
//   - No adapter acts unless the store has durably recorded commit_intent
//     and then committing for that exact effect revision, under the current
//     epoch, after the nine commit checks and the whole-lease check
//     (Config.LeaseCheck: kind, target, class, every path the effect
//     changes, bytes per effect, and the durable bytes_total and
//     effects_per_minute spend) passed inside the store's locks, for every
//     class, with or without a verifier. Without a LeaseCheck nothing
//     commits.
//     An effect still at commit_intent after a crash therefore provably never
//     reached its adapter. Only committing and the outcome wait for their
//     flush; the committing flush carries commit_intent and everything
//     before it, and a crash before it loses at most a proposal, an
//     evaluation or a commit_intent no adapter acted under, which the
//     worker redoes (store/doc.go, "Durability").
//   - An outcome that cannot be proven from the target's own evidence is
//     commit_unknown, never committed; reconciliation settles it by reading
//     the target, never by acting again.
//   - A class 4 effect commits only with an Ed25519 approval that verifies,
//     at commit time, for its exact id, revision, episode, epoch and payload
//     digest.
//   - The worker never names a host path, URL or credential: targets come
//     from trusted configuration and the worker supplies a bounded,
//     target-relative request. Errors crossing the socket are catalogue
//     codes only.
//   - At most Concurrency requests are served at once; the next is refused
//     at once with effect_broker_saturated.
//
// Design decisions beyond ARCHITECTURE §5:
//
//   - git_commit applies the patch to a temporary index (GIT_INDEX_FILE),
//     not a checked-out worktree: no file of the patch is ever materialised
//     on the host, so smudge/clean filters, checkout hooks and fsmonitor have
//     nothing to run on; hooks, fsmonitor, includes and global/system
//     configuration are disabled on every git invocation in addition. The
//     path allow/forbid check runs on the resulting tree diff (renames as
//     delete+add, modes included), not on the patch text.
//   - What a patch adds is measured from the patch itself (scanPatch)
//     before git runs; git then runs under rlimits with its new objects in
//     a quarantine object directory, which only a commit moves into the
//     repository. A prepare therefore never grows the repository.
//   - A failed compare-and-swap of our own brand-new commit, with the ref
//     now holding something that does not contain it, is provably not
//     committed: ref_moved. Movement the broker cannot read that way (a git
//     cut off mid-swap, a ref that moved past our commit) is commit_unknown
//     ("ambiguous"): the broker never claims an answer it cannot prove, and
//     an operator settles it (Settle) only where the target itself cannot
//     decide — the target's reconciliation always outranks the operator.
//   - git_commit never moves a ref a work tree has checked out (its index
//     would be left reversed); a request that says create makes a new
//     branch under an allowed prefix by a compare-and-swap against its
//     absence, so runs on their own branches never meet; symlinks land only
//     where the target allows them and their text, read from the new tree,
//     stays inside the repository.
//   - The kernel proposes for an episode (the harvest) through
//     PrepareKernel: the same fence, quotas and validation as a worker's
//     prepare, with a payload up to MaxPayload rather than a frame's.
//
// The broker imports store and protocol only; it never imports kernel code.
package broker
