// Package pgcluster runs a private, local PostgreSQL cluster for the
// authority store: found on the host, initialised on first use, listening on
// a unix socket only, with fsync and synchronous_commit on (the store turns
// synchronous_commit off, per transaction, only for the records a crash may
// lose: store/doc.go, "Durability").
//
// Invariant: the cluster never runs as root and is never reachable over the
// network. postgres is started as an explicitly named unprivileged account
// (or as the calling user when that user is not root); a request to run it
// as uid 0 is refused before initdb or postgres is executed. The socket
// directory and data directory are private (0700) to that account, and
// authentication is scram-sha-256 even on the socket, so reaching the file
// is not enough to act as the kernel role.
//
// The package signals only the postmaster it started, by its pid, and that
// postmaster's own children; it never signals a postgres it did not start.
package pgcluster
