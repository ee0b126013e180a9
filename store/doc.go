// Package store is the authority store: the only place where Autonomic
// decides what is true about episodes, epochs, leases, effects, decisions,
// checkpoints and recovery lineage. Its implementation is PostgreSQL.
//
// Invariants:
//
//   - An effect never reaches commit_intent under an epoch other than the
//     episode's current one. BeginCommit locks episode → effect → lease
//     FOR UPDATE, in that order, re-reads them and records commit_intent in
//     the same transaction; AdvanceEpoch locks the same episode row first,
//     so the two are totally ordered per episode.
//   - An episode's budget spend (Spend: bytes and effects per minute) is
//     read by BeginCommit under the episode's row lock and the new commit's
//     spend recorded in the same transaction, so two racing commits cannot
//     both spend the last byte.
//   - Every mutation writes its ledger event in the same transaction as the
//     change it records; there is no change without its event and no event
//     without its change. The ledger is hash-chained per episode and the
//     kernel's database role cannot UPDATE or DELETE it.
//   - Effect states change only through the one transition table in
//     state.go; an illegal transition is a typed error and changes nothing.
//   - Only the kernel process holding an episode's ownership lease (by the
//     database's clock) may mutate it, so two kernels on one database never
//     both drive an episode. The lease names the instance and the process
//     (a UUIDv7 each store handle draws when it opens): two processes of
//     one instance, as in an overlapping restart, are two owners, and the
//     newer one's AcquireOwnership fences the older at once.
//   - Durability: of an effect's walk only two records wait for their WAL
//     flush — committing, the intent an adapter acts under, and the
//     outcome. A proposal, a prepare, a revision, an evaluation and
//     commit_intent commit with synchronous_commit off, so a database
//     crash may lose the last of them, and only those: PostgreSQL's WAL is
//     one sequence flushed as a prefix, so a durable commit carries every
//     commit before it, and nothing an adapter acted under can be lost.
//     What a lost record established is re-checked, under the locks, by
//     the transaction that depends on it (BeginCommit reads the effect
//     ready; committing reads it at commit_intent of its revision), so a
//     crash and restart between the two fails the later one. Every other
//     mutation is durable when it returns. EnterCommit runs commit_intent
//     and committing as these two transactions on one connection, the
//     second's BEGIN and locks sent behind the first's COMMIT: one round
//     trip fewer, the same two commits and the same re-checks.
//     EnterCommitInEpisode also reads the worker's ownership of the effect
//     (EffectInEpisode's answers) under commit_intent's locks.
//   - When the database cannot be reached, or a commit's outcome is
//     unknown, every call fails with protocol.CodeAuthorityUnavailable.
//     Nothing is cached: every answer is read in the transaction that
//     depends on it.
//
// The store must never import kernel code, and never act on the world: it
// records intent and outcome, adapters act.
package store
