package store

import (
	"errors"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/jackc/pgx/v5/pgconn"
)

// classify turns an error from inside a transaction into one that carries
// a catalogue code. Catalogue errors pass through. A PostgreSQL error means
// the server answered and rolled the transaction back, so the outcome is
// known; anything else (a dead socket, a cancelled context, a server that
// went away) leaves the caller unable to know what the database holds, and
// is authority_unavailable.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return err
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case len(pg.Code) >= 2 && (pg.Code[:2] == "08" || pg.Code[:2] == "53" || pg.Code[:2] == "57" || pg.Code[:2] == "58"):
			// connection exception, insufficient resources, operator
			// intervention (shutdown, cancel), system error.
			return protocol.Errorf(protocol.CodeAuthorityUnavailable, "%s: %w", op, err)
		case pg.Code == "40001" || pg.Code == "40P01" || pg.Code == "55P03":
			// serialization failure, deadlock, lock not available: rolled
			// back, retryable.
			return protocol.Errorf(protocol.CodeAuthorityUnavailable, "%s: %w", op, err)
		}
		return protocol.Errorf(protocol.CodeInternal, "%s: %w", op, err)
	}
	return protocol.Errorf(protocol.CodeAuthorityUnavailable, "%s: %w", op, err)
}

// connBroken reports whether err leaves the connection unusable or of
// unknown state, so it must be discarded rather than pooled.
func connBroken(err error) bool {
	if err == nil {
		return false
	}
	var pe *protocol.Error
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return len(pg.Code) >= 2 && (pg.Code[:2] == "08" || pg.Code[:2] == "57")
	}
	if errors.As(err, &pe) {
		// Our own refusal, raised between statements: the connection
		// is fine.
		return pe.Code == protocol.CodeAuthorityUnavailable
	}
	return true
}

func notFound(what string) error {
	return protocol.Errorf(protocol.CodeNotFound, "%s not found", what)
}

func stale(format string, args ...any) error {
	return protocol.Errorf(protocol.CodeStaleAuthority, format, args...)
}

func invalid(format string, args ...any) error {
	return protocol.Errorf(protocol.CodeInvalidField, format, args...)
}

func staleEpoch(claimed, current int64) error {
	return protocol.Errorf(protocol.CodeStaleRequestEpoch, "request epoch %d, current %d", claimed, current)
}

func isUniqueViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505"
}
