// Package ledger defines the hash chain of the authority store's event
// ledger and verifies it.
//
// Invariant: an entry's hash commits to every column of its row — episode,
// sequence number, epoch, kind, time, canonical body and the previous
// entry's hash — through SHA-256 over the RFC 8785 canonical JSON of a
// versioned envelope. Changing, removing, inserting or reordering any entry
// therefore breaks the chain at the first entry affected, and Verify names
// that entry. Verify never trusts a stored hash or sequence number: it
// recomputes everything from content.
//
// The chain proves integrity relative to its head. A party that can rewrite
// the whole chain and the recorded head (a database superuser) can forge
// history; exporting heads to an external witness is what closes that gap,
// and is outside this package.
package ledger
