// Package episode is the episode controller: it starts an episode from its
// spec, runs its parts under one rest-for-one supervisor, contains and
// repairs it from verified checkpoints, and resumes or contains it when the
// kernel starts again.
//
// Invariants:
//   - An episode starts only from a spec whose policy is a signed
//     kernel/policy envelope that verifies against Config.PolicyKeys. A
//     policy refusal or an invalid spec returns a catalogue error
//     (forbidden, invalid_field, ...) before the store, the workspace or
//     the launcher is touched. The one spec error found later — a base OID
//     its repository lacks, seen when the workspace is prepared — is also
//     invalid_field, and the episode it created ends aborted.
//   - A worker never runs against dead authority. An episode's parts are
//     supervised in the order authority → broker server → domain; when the
//     authority (ownership and episode state in the store) or the broker
//     server fails, the domain is destroyed before anything else happens.
//   - A domain only ever runs under the episode's current epoch, with a
//     live lease of that epoch: every violation or containment advances the
//     epoch (staling pending effects and revoking leases in one store
//     transaction) before the old domain is destroyed and proven empty
//     (destroy, then inspect), and a new generation gets a new lease.
//   - The broker socket serves only the current generation's cgroup; while
//     a repair runs it serves none.
//   - Repair restores only a stable checkpoint of this episode, and only if
//     the store's record agrees with what the launcher returned when it was
//     taken and the launcher's re-hash on restore; the repair lease is the
//     intersection of the previous lease and the spec's repair narrowing,
//     so it is never wider. After max_repairs, containment is final and the
//     store records why.
//   - A backend that cannot checkpoint (domain.Features; UnsafeLocal) is
//     never asked to: no checkpoint is taken or recorded, and what would
//     need a repair — a violation, a containment, a kernel restart — ends
//     the episode contained, its reason saying no checkpoint exists on
//     that backend. It never pretends to repair.
//   - An unisolated backend is labelled: its domain_created event carries
//     "unsafe_local": true and Status.UnsafeLocal is set. Its worker shares
//     the kernel's cgroup, which is all the broker socket can bind.
//   - Lifecycle states change only through the one table in state.go, and
//     moveLocked is the only code that writes one (a test reads the
//     source to hold it so). A new episode starts pending; one taken over
//     at kernel start moves pending → suspended, a move the table names.
//   - The control loops live in kernel/governor, which holds the
//     episode's trajectory record (opened when the controller takes the
//     episode, closed when it forgets it) and reports containment to
//     containAt; a containment goes through the repair path. With automatic
//     verification (the governor's Verification, the broker's Verifier set
//     to Governor.Evaluate), a class 3+ git_commit is verified by kernel/verify
//     in a clean one-shot domain before it may be ready; without a runner,
//     Evaluate fails and nothing commits.
//   - The live regulator's level (Config.Regulator, kernel/regulator)
//     caps every lease minted (start, repair, resume) and, through the
//     governor, the class the commit check lets through.
//   - Harvest (harvest.go). Only a spec that names harvest ends by itself
//     when its worker exits (any other stays running until an operator
//     ends it). The worker's domain loses the broker, is checkpointed
//     (recorded unstable: it holds unverified writes and no repair
//     restores it), and its change is read from that archive, re-hashed
//     against the launcher's digest (workspace.Harvest, whose doc states
//     the rules for hostile content). A change is proposed as a git_commit
//     to the spec's target and ref on the base OID through the broker's
//     own Prepare, Evaluate and Commit under the current epoch and lease,
//     so it meets the same fence, quotas, verification, sensors and commit
//     check as a worker's effect; the commit message is made from the task
//     alone (no honest channel carries the agent's final words). A worker
//     that committed on the harvest target itself is not harvested again.
//     The episode then ends, its domain destroyed first, with an Outcome —
//     landed, denied, nothing_to_commit (completed), or harvest_failed
//     (aborted) — recorded as its episode_ended reason. Its state becomes
//     final only once the store has recorded that end (retried while the
//     store is unavailable); until then it is suspended, as the store's
//     active says. A kernel start that finds the harvest begun (the
//     unstable checkpoint in the ledger) and its git_commit committed ends
//     the episode with that landed outcome: a worker whose change landed
//     never runs again, and its change is never proposed again.
//   - Wall time: an episode lives at most its spec's wall_time (the
//     configured default when it names none; never above the configured
//     maximum, which a spec above it is refused for), counted from its
//     creation across repairs and restarts. Then its domain is destroyed
//     and it ends aborted with outcome wall_time; nothing is harvested.
//   - Services (services.go). A spec may name the launcher rootfs its
//     worker runs on, a seccomp profile from a closed set (worker, the
//     default; agent), and an inference provider of the configuration;
//     anything else is invalid_field before anything exists. A named
//     provider gets the episode its own relay (kernel/relay) on
//     <sockets_root>/<id>-inference.sock, budgeted by the signed policy's
//     inference section (none: every call refused); a policy that grants
//     egress gets its own proxy (kernel/egress) on <id>-egress.sock, its
//     allow list the grant intersected with the operator's ceiling. Both
//     are owned like the broker's socket, bound by the launcher at
//     /run/autonomic/{inference,egress}.sock, and supervised between the
//     broker and the domain (a relay or proxy that dies takes the domain
//     with it); their sockets go when the supervisor stops. A budget
//     exhausted is pressure, each refused fetch drift, on the fast loop:
//     the homeostat narrows, and a worker that keeps hammering refused
//     hosts is contained. Verifying an effect of an agent-profile episode
//     with egress, the verification domain gets a proxy of its own on
//     verify-<uuid>-egress.sock (verifyEgress): the same allow list, cap,
//     ledger, cache and refusal signal, stopped before the verdict.
//   - Setup (setup.go). A spec naming setup runs its argv before the
//     worker, in a domain of the episode's workspace as the worker, on its
//     rootfs, under its seccomp program, through its egress proxy; what it
//     left is a layer kept under a key that hashes the repository, the
//     rootfs name, the argv, the egress grant and the lockfiles' blobs at
//     the base (read from the trusted repository, never the workspace).
//     The episode's pristine base is the layer restored, made on this
//     host's rootfs of the digest the layer was made on (another digest
//     sets up again); an episode of a kept key runs no setup and fetches
//     nothing. A layer is replicated before it is recorded, imported
//     (digest-checked by the launcher) where this kernel does not know its
//     holder holds it, bounded by MaxSetupLayers (least recently used
//     evicted, its hold released), and restored beneath every verification
//     of the episode's effects; a layer an episode needs and cannot find
//     is an error, never a verification without it.
//   - Kernel start (Recover) reconciles unsettled effects before anything
//     else, then, per active episode, advances the epoch before destroying
//     every generation the previous kernel launched (destroy, then inspect)
//     and only then resumes it as a repair — counted against max_repairs,
//     so a crash loop ends contained — or contains it.
//
// Snapshot rule (on a backend that can checkpoint): an episode's first
// stable checkpoint is its pristine base — a domain of its workspace whose
// only process is a no-op shell (no worker code, no broker socket) is
// checkpointed after that process exits and destroyed. (The launcher starts
// a worker as it creates its domain, so a checkpoint of the worker's own
// domain would hold whatever it had written by then.) Generation 1 starts
// beside it with an empty upper layer over the same workspace — the tree
// the base holds — so the worker does not wait for it; Start returns only
// once the base is recorded, and no other checkpoint is taken and no repair
// restores before, so it is always the first stable checkpoint. After every
// effect of the episode commits, the current generation is checkpointed
// again. Both are recorded stable at
// once: the base because it is the base OID's tree, a post-commit one
// because its effect has already passed the commit horizon's evaluation
// (verification, when configured, is a prerequisite of commit).
//
// The controller names host paths only from its trusted configuration and
// the spec; a worker never names one.
package episode
