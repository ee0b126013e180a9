package store

import (
	"context"
	"encoding/json"
	"errors"
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

// run executes fn in one transaction. It is the only place a transaction
// begins or ends, so the outcome rules live here: fn failing rolls back; a
// COMMIT that fails without a server answer has an unknown outcome and is
// authority_unavailable; a connection in doubt is never reused.
func (p *Postgres) run(ctx context.Context, op string, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
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

// mtx is one mutation of one episode, inside run, with the episode row
// locked. Changes to ep are written back by flush together with the ledger
// events, so the episode row is written once per transaction.
type mtx struct {
	ctx    context.Context
	tx     pgx.Tx
	ep     Episode
	now    time.Time // the database clock, read under the episode lock
	writes pgx.Batch
	events []event
}

type event struct {
	epoch int64
	kind  string
	body  any
}

// write queues a statement whose result is not needed; it runs in flush,
// in order, before the events.
func (m *mtx) write(sql string, args ...any) { m.writes.Queue(sql, args...) }

// emit queues a ledger event at the episode's current epoch.
func (m *mtx) emit(kind string, body any) {
	m.events = append(m.events, event{epoch: m.ep.Epoch, kind: kind, body: body})
}

func (m *mtx) requireActive() error {
	if m.ep.State != EpisodeActive {
		return stale("episode is %s, not active", m.ep.State)
	}
	return nil
}

// requireEpoch checks a request's claimed epoch against the current one.
func (m *mtx) requireEpoch(claimed int64) error {
	if claimed != m.ep.Epoch {
		return staleEpoch(claimed, m.ep.Epoch)
	}
	return nil
}

// flush writes queued statements, the ledger events and the episode row.
// A transaction that changes something must say so in the ledger: queued
// writes without an event are a bug, refused here rather than committed
// unrecorded.
func (m *mtx) flush() error {
	if len(m.events) == 0 {
		if m.writes.Len() > 0 {
			return protocol.Errorf(protocol.CodeInternal, "store: mutation without a ledger event")
		}
		return nil
	}
	head := m.ep.LedgerHead
	for _, ev := range m.events {
		e, err := ledger.Seal(head, m.ep.ID, ev.epoch, ev.kind, m.now, ev.body)
		if err != nil {
			return protocol.Errorf(protocol.CodeInternal, "store: %w", err)
		}
		m.writes.Queue(`INSERT INTO events (episode_id, seq, epoch, kind, body, at, prev_hash, hash)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			e.EpisodeID, e.Seq, e.Epoch, e.Kind, string(e.Body), e.At, e.Prev[:], e.Hash[:])
		head = ledger.Head{Seq: e.Seq, Hash: e.Hash}
	}
	m.ep.LedgerHead = head
	m.ep.UpdatedAt = m.now
	m.writes.Queue(`UPDATE episodes SET state = $2, epoch = $3, policy_version = $4, current_checkpoint = $5,
		owner_instance = $6, owner_token = $7, owner_expires_at = $8, ledger_seq = $9, ledger_head = $10,
		updated_at = $11 WHERE id = $1`,
		m.ep.ID, string(m.ep.State), m.ep.Epoch, m.ep.PolicyVersion, m.ep.CurrentCheckpoint,
		m.ep.Owner.InstanceID, m.ep.Owner.Token, m.ep.Owner.ExpiresAt, head.Seq, head.Hash[:], m.now)
	br := m.tx.SendBatch(m.ctx, &m.writes)
	for i := 0; i < m.writes.Len(); i++ {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
	}
	return br.Close()
}

const episodeCols = `id, spec, state, epoch, policy_version, current_checkpoint, owner_instance,
	owner_token, owner_expires_at, ledger_seq, ledger_head, created_at, updated_at`

// lockEpisode takes the episode's row lock — the first lock of every
// mutation, which is what orders every change to an episode's authority —
// and reads the database clock after the lock is granted.
func lockEpisode(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Episode, time.Time, error) {
	var now time.Time
	row := tx.QueryRow(ctx, `SELECT `+episodeCols+`, clock_timestamp() FROM episodes WHERE id = $1 FOR UPDATE`, id)
	ep, err := scanEpisode(row, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return Episode{}, now, notFound("episode")
	}
	return ep, now.UTC(), err
}

// mutate runs fn as a mutation of the episode that episodeOf names (it is
// resolved inside the same transaction; an object's episode never changes,
// so reading it before the lock is safe). Only the instance holding the
// episode's unexpired ownership lease may mutate it.
func (p *Postgres) mutate(ctx context.Context, op string, episodeOf func(pgx.Tx) (uuid.UUID, error), fn func(*mtx) error) error {
	return p.run(ctx, op, pgx.TxOptions{}, func(tx pgx.Tx) error {
		id, err := episodeOf(tx)
		if err != nil {
			return err
		}
		ep, now, err := lockEpisode(ctx, tx, id)
		if err != nil {
			return err
		}
		if ep.Owner.InstanceID != p.instance || !now.Before(ep.Owner.ExpiresAt) {
			return stale("this kernel instance does not hold the episode's ownership lease")
		}
		m := &mtx{ctx: ctx, tx: tx, ep: ep, now: now}
		if err := fn(m); err != nil {
			return err
		}
		return m.flush()
	})
}

func episodeID(id uuid.UUID) func(pgx.Tx) (uuid.UUID, error) {
	return func(pgx.Tx) (uuid.UUID, error) { return id, nil }
}

// episodeOfRow resolves the episode of a row in table by id.
func episodeOfRow(ctx context.Context, table, what string, id uuid.UUID) func(pgx.Tx) (uuid.UUID, error) {
	return func(tx pgx.Tx) (uuid.UUID, error) {
		var ep uuid.UUID
		err := tx.QueryRow(ctx, `SELECT episode_id FROM `+table+` WHERE id = $1`, id).Scan(&ep)
		if errors.Is(err, pgx.ErrNoRows) {
			return uuid.Nil, notFound(what)
		}
		return ep, err
	}
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
	if _, err := ledger.CanonicalizeObject(raw); err != nil {
		return nil, invalid("%s must be a JSON object: %v", field, err)
	}
	return raw, nil
}

func digestOf(raw []byte) string { return sha256Hex(raw) }
