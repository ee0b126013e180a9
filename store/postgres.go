package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store/ledger"
	"github.com/autonomic-kernel/autonomic/store/migrations"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Config configures Open.
type Config struct {
	// URL connects as the kernel role; everything the store does at run
	// time goes through it.
	URL string
	// AdminURL, when set, connects as the schema owner to apply pending
	// migrations before the store starts. Without it the store only
	// checks that the schema is exactly what this binary expects.
	AdminURL string
	// InstanceID names this kernel instance for ownership leases.
	InstanceID string
	// OwnerTTL is how long an ownership lease lasts without renewal
	// (default 15s).
	OwnerTTL time.Duration
	// MaxConns bounds open connections (default 8).
	MaxConns int
	Logger   hclog.Logger
}

// Postgres is the Store on PostgreSQL.
type Postgres struct {
	pool     *pool
	instance string
	// process names this handle in the ownership leases it takes (a
	// UUIDv7: random, and ordered by when the handle opened).
	process  uuid.UUID
	ownerTTL time.Duration
	log      hclog.Logger
}

var _ Store = (*Postgres)(nil)

const maxTextField = 256

// Open migrates (with AdminURL) and checks the schema, and returns a store.
// An edited migration or a newer schema is refused with a clear error.
func Open(ctx context.Context, cfg Config) (*Postgres, error) {
	if cfg.InstanceID == "" || len(cfg.InstanceID) > maxTextField {
		return nil, invalid("store: InstanceID must be 1..%d bytes", maxTextField)
	}
	if cfg.OwnerTTL <= 0 {
		cfg.OwnerTTL = 15 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	set, err := migrations.Embedded()
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "store: %w", err)
	}
	if cfg.AdminURL != "" {
		if err := migrate(ctx, cfg.AdminURL, set, cfg.Logger); err != nil {
			return nil, err
		}
	}
	pcfg, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return nil, invalid("store: database URL: %v", err)
	}
	pcfg.RuntimeParams["application_name"] = "autonomic-kernel"
	// A kernel that hangs inside a transaction must not hold an episode's
	// lock forever: the server ends such a session, which rolls back.
	pcfg.RuntimeParams["idle_in_transaction_session_timeout"] = "60000"
	p := &Postgres{
		pool:     newPool(pcfg, cfg.MaxConns),
		instance: cfg.InstanceID,
		process:  uuid.Must(uuid.NewV7()),
		ownerTTL: cfg.OwnerTTL,
		log:      cfg.Logger.Named("store"),
	}
	err = p.run(ctx, "open", pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return migrations.Check(ctx, tx, set)
	})
	if err != nil {
		p.Close()
		return nil, schemaError(err)
	}
	return p, nil
}

func migrate(ctx context.Context, url string, set []migrations.Migration, log hclog.Logger) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return classify("migrate", err)
	}
	defer conn.Close(context.Background())
	n, err := migrations.Apply(ctx, conn, set)
	if err != nil {
		return schemaError(classify("migrate", err))
	}
	if n > 0 {
		log.Info("applied migrations", "count", n, "version", len(set))
	}
	return nil
}

// schemaError makes a schema mismatch an internal error (it is not
// retryable, and retrying would be wrong), keeping the cause for errors.Is.
func schemaError(err error) error {
	for _, e := range []error{migrations.ErrEdited, migrations.ErrNewerSchema, migrations.ErrIncomplete, migrations.ErrBadSet} {
		if errors.Is(err, e) {
			return protocol.Errorf(protocol.CodeInternal, "store: refusing to start: %w", err)
		}
	}
	return err
}

// Close releases every connection.
func (p *Postgres) Close() { p.pool.close() }

// run executes fn in one transaction, for what does not go through mutate
// (creating an episode, ownership, multi-statement reads). The outcome rules
// are mutate's: fn failing rolls back; a COMMIT that fails without a server
// answer has an unknown outcome and is authority_unavailable; a connection
// in doubt is never reused.
func (p *Postgres) run(ctx context.Context, op string, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	return once(func() error { return p.runOnce(ctx, op, opts, fn) })
}

func (p *Postgres) runOnce(ctx context.Context, op string, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	conn, err := p.pool.acquire(ctx)
	if err != nil {
		return classify(op, err)
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		p.pool.release(conn, false)
		return classify(op, err)
	}
	if err := fn(tx); err != nil {
		rbErr := tx.Rollback(ctx)
		p.pool.release(conn, rbErr == nil && !connBroken(err))
		return classify(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		p.pool.release(conn, false)
		var pg *pgconn.PgError
		if errors.As(err, &pg) {
			return classify(op, err) // the server refused: rolled back
		}
		return protocol.Errorf(protocol.CodeAuthorityUnavailable, "%s: commit outcome unknown: %w", op, err)
	}
	p.pool.release(conn, true)
	return nil
}

// read runs a read-only query transaction. REPEATABLE READ gives multi-
// statement reads one snapshot.
func (p *Postgres) read(ctx context.Context, op string, fn func(pgx.Tx) error) error {
	return p.run(ctx, op, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// checkJSONObject requires raw to be a JSON object (or empty, meaning {}).
func checkJSONObject(field string, raw json.RawMessage, max int) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if len(raw) > max {
		return nil, invalid("%s exceeds %d bytes", field, max)
	}
	if err := ledger.CheckObject(raw); err != nil {
		return nil, invalid("%s must be a JSON object: %v", field, err)
	}
	// jsonb cannot store NUL; refuse it here as bad input rather than let
	// the server fail the transaction.
	if bytes.Contains(raw, []byte(`\u0000`)) {
		return nil, invalid("%s contains a NUL character", field)
	}
	return raw, nil
}

func digestOf(raw []byte) string { return sha256Hex(raw) }

// prefixed qualifies each column of a column list with alias.
func prefixed(alias, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// Instance names the kernel instance this handle acts for (its ownership
// leases and task claims).
func (p *Postgres) Instance() string { return p.instance }
