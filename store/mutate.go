package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store/ledger"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// target names what a mutation locks. Every lock is taken in the first
// round trip, pipelined behind BEGIN, in the fixed order episode → effect →
// lease; the episode is always first, which is what totally orders the
// changes to one episode's authority (and why no two store transactions
// can deadlock).
type target struct {
	// via is the table whose row id names the episode ("" when id is the
	// episode's own id). An object's episode never changes, so resolving
	// it in the lock statement is safe.
	via  string
	id   uuid.UUID
	what string // for not_found
	// effect: also lock the effect (via == "effects"), or, with
	// effectID, the effect effectID if it is the episode id's (via ==
	// ""): absent from mtx.locked when it is not (and then its lease and
	// decisions are not read either).
	effect   bool
	effectID uuid.UUID
	// leaseMode, when set ("FOR SHARE" or "FOR UPDATE"), also locks a
	// lease: leaseID if set, otherwise the effect's.
	leaseMode string
	leaseID   uuid.UUID
	// decisions: also read the decisions bound to the effect's current
	// revision and epoch (under the effect's lock, so they cannot move).
	decisions bool
	// spend: also read the episode's spend (spendSQL), under the lock.
	spend bool
	// lossy: the transaction commits without waiting for its WAL flush
	// (synchronous_commit = off). Only for the records a database crash
	// may lose (doc.go, "Durability"): a proposal, a prepare, an
	// evaluation, commit_intent.
	lossy bool
}

func onEpisode(id uuid.UUID) target { return target{id: id, what: "episode"} }

func onRow(table, what string, id uuid.UUID) target { return target{via: table, id: id, what: what} }

func onEffect(id uuid.UUID) target {
	return target{via: "effects", id: id, what: "effect", effect: true}
}

// episodeID is the episode's id as an SQL expression of $1.
func (tg target) episodeID() string {
	if tg.via == "" {
		return `$1`
	}
	return `(SELECT episode_id FROM ` + tg.via + ` WHERE id = $1)`
}

func (tg target) episodeSQL() string {
	return `SELECT ` + episodeLockCols + `, clock_timestamp() FROM episodes WHERE id = ` + tg.episodeID() + ` FOR UPDATE`
}

// mtx is one mutation of one episode, with the episode row locked. Changes
// to ep are written back at commit together with the ledger events, so the
// episode row is written once per transaction.
type mtx struct {
	ctx    context.Context
	tx     pgx.Tx
	ep     Episode
	now    time.Time // the database clock, read under the episode lock
	writes pgx.Batch
	events []event

	// locked holds each effect as it was when locked (updated as it is
	// saved), so saveEffect writes only what changed.
	locked map[uuid.UUID]Effect
	// Rows locked in the first round trip, when the target asked.
	lease     *Lease
	decisions []Decision
	spent     Spend
	// lossy: see target.lossy.
	lossy bool
	// actions opened (or read) in this transaction, by effect id: its
	// writes are queued, so a second read would not see them.
	actions map[uuid.UUID]*Action
}

func (m *mtx) lock(e Effect) {
	if m.locked == nil {
		m.locked = map[uuid.UUID]Effect{}
	}
	m.locked[e.ID] = e
}

type event struct {
	epoch int64
	kind  string
	body  map[string]any
}

// write queues a statement whose result is not needed; it runs at commit,
// in order, before the events.
func (m *mtx) write(sql string, args ...any) { m.writes.Queue(sql, args...) }

// emit queues a ledger event at the episode's current epoch.
func (m *mtx) emit(kind string, body map[string]any) {
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

// mutate runs fn as one transaction on the episode tg names. Only the
// instance holding the episode's unexpired ownership lease (by the
// database's clock) may mutate it. Round trips: BEGIN and the locks; what
// fn reads; the writes, events, episode row and COMMIT.
func (p *Postgres) mutate(ctx context.Context, op string, tg target, fn func(*mtx) error) error {
	return once(func() error { return p.mutateOnce(ctx, op, tg, fn) })
}

// once retries f a single time when its failure provably never reached the
// server (pgx reports no byte was written: typically a pooled connection to
// a server that has since restarted). Nothing was executed, so nothing can
// be executed twice; every other failure is returned as it is.
func once(f func() error) error {
	err := f()
	if err != nil && pgconn.SafeToRetry(err) {
		return f()
	}
	return err
}

func (p *Postgres) mutateOnce(ctx context.Context, op string, tg target, fn func(*mtx) error) error {
	conn, m, _, committed, err := p.transact(ctx, tg, fn, nil)
	if conn == nil {
		return classify(op, err)
	}
	return p.end(conn, m, op, committed, err)
}

// transact is one mutation on a pooled connection: BEGIN and tg's locks,
// the ownership check, fn, COMMIT. With next, the next transaction's BEGIN
// and locks travel behind the COMMIT and m2 holds them. conn is nil when
// none could be acquired; otherwise the caller ends it (end).
func (p *Postgres) transact(ctx context.Context, tg target, fn func(*mtx) error, next *target) (conn *pgx.Conn, m, m2 *mtx, committed bool, err error) {
	if conn, err = p.pool.acquire(ctx); err != nil {
		return nil, nil, nil, false, err
	}
	m, err = begin(ctx, conn, tg)
	if err == nil {
		err = p.owns(m)
	}
	if err == nil {
		err = fn(m)
	}
	if err == nil {
		committed, m2, err = m.commit(next)
	}
	return conn, m, m2, committed, err
}

// owns refuses a mutation unless this process holds the episode's
// unexpired ownership lease, by the database's clock read under the lock.
// The process, not only the instance id: an older process of the same
// instance is fenced as soon as a newer one takes the lease.
func (p *Postgres) owns(m *mtx) error {
	if m.ep.Owner.InstanceID != p.instance || m.ep.Owner.Process != p.process || !m.now.Before(m.ep.Owner.ExpiresAt) {
		return stale("this kernel process does not hold the episode's ownership lease")
	}
	return nil
}

// end returns conn to the pool after a transaction: rolled back if it did
// not commit, discarded unless it is known idle and healthy.
func (p *Postgres) end(conn *pgx.Conn, m *mtx, op string, committed bool, err error) error {
	if err != nil {
		healthy := !connBroken(err)
		if !committed && m != nil && m.tx != nil {
			if rbErr := m.tx.Rollback(m.ctx); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
				healthy = false
			}
		}
		p.pool.release(conn, healthy && conn.PgConn().TxStatus() == 'I')
		return classify(op, err)
	}
	p.pool.release(conn, true)
	return nil
}

// mutateThen runs fn as one transaction on tg and then fn2 as a second on
// tg2, on the same connection, with the second's BEGIN and locks pipelined
// behind the first's COMMIT: the second costs one round trip (its writes
// and COMMIT) instead of two. Each is a whole mutation — its own locks,
// ownership check, checks and ledger events — so the pair is exactly the
// two calls made back to back; only the locks of the second are taken
// sooner. between runs once the first has committed, before the second
// writes anything (a fault-injection point: a crash there must find the
// two transactions as separate as before). The second runs on ctx without
// its cancellation, bounded by thenWindow: once the first is recorded the
// second is attempted to its end. Whenever the second cannot use the
// pipelined locks (they failed, or the connection broke and it provably
// did not commit) it is run again from the start, as mutate would.
func (p *Postgres) mutateThen(ctx context.Context, op string, tg target, fn func(*mtx) error,
	between func(), op2 string, tg2 target, fn2 func(*mtx) error) error {
	var conn *pgx.Conn
	var m2 *mtx
	err := once(func() error {
		c, m, next, committed, err := p.transact(ctx, tg, fn, &tg2)
		if c == nil {
			return classify(op, err)
		}
		m2 = next
		if err != nil {
			return p.end(c, m, op, committed, err)
		}
		if m2 == nil {
			// The first committed, the second's start failed: roll
			// back whatever of it the server began, and redo it below.
			_ = m.tx.Rollback(ctx)
			p.pool.release(c, !c.IsClosed() && c.PgConn().TxStatus() == 'I')
			return nil
		}
		conn = c
		return nil
	})
	if err != nil {
		return err
	}
	if between != nil {
		between()
	}
	ctx2, cancel := context.WithTimeout(context.WithoutCancel(ctx), thenWindow)
	defer cancel()
	if m2 == nil {
		return p.mutate(ctx2, op2, tg2, fn2)
	}
	m2.ctx = ctx2
	err = p.owns(m2)
	if err == nil {
		err = fn2(m2)
	}
	committed := false
	if err == nil {
		committed, _, err = m2.commit(nil)
	}
	if err != nil && (pgconn.SafeToRetry(err) || !committed && connBroken(err)) {
		// The second provably did not commit (nothing of its writes was
		// sent, or the server ended the connection before its COMMIT)
		// and its locks died with the connection: run it again, afresh.
		p.pool.release(conn, false)
		return p.mutate(ctx2, op2, tg2, fn2)
	}
	return p.end(conn, m2, op2, committed, err)
}

// thenWindow bounds the second transaction of mutateThen.
const thenWindow = time.Minute

// begin sends BEGIN and every lock of tg in one pipelined round trip.
func begin(ctx context.Context, conn *pgx.Conn, tg target) (*mtx, error) {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	queueLocks(&b, tg)
	br := conn.SendBatch(ctx, &b)
	m := &mtx{ctx: ctx, tx: br.Tx(), lossy: tg.lossy}
	err := readLocks(br, m, tg)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return m, err
}

// queueLocks queues the statements that lock and read what tg names, in
// the fixed order; readLocks reads their results after the BEGIN's.
func queueLocks(b *pgx.Batch, tg target) {
	b.Queue(tg.episodeSQL(), tg.id)
	switch {
	case tg.effect && tg.effectID != uuid.Nil:
		b.Queue(`SELECT `+effectCols+` FROM effects WHERE id = $1 AND episode_id = $2 FOR UPDATE`, tg.effectID, tg.id)
	case tg.effect:
		b.Queue(`SELECT `+effectCols+` FROM effects WHERE id = $1 FOR UPDATE`, tg.id)
	}
	// The effect whose lease and decisions are read: tg.id, or effectID
	// if it is the episode's.
	effectIs, decisionIs, eargs := `id = $1`, `d.effect_id = $1`, []any{tg.id}
	if tg.effect && tg.effectID != uuid.Nil {
		effectIs, decisionIs = `id = $1 AND episode_id = $2`, `d.effect_id = $1 AND e.episode_id = $2`
		eargs = []any{tg.effectID, tg.id}
	}
	if tg.leaseMode != "" {
		if tg.leaseID != uuid.Nil {
			b.Queue(`SELECT `+leaseCols+` FROM leases WHERE id = $1 `+tg.leaseMode, tg.leaseID)
		} else {
			b.Queue(`SELECT `+leaseCols+` FROM leases WHERE id = (SELECT lease_id FROM effects WHERE `+effectIs+`) `+tg.leaseMode, eargs...)
		}
	}
	if tg.decisions {
		b.Queue(`SELECT `+prefixed("d", decisionCols)+` FROM decisions d
			JOIN effects e ON e.id = d.effect_id AND e.revision = d.revision AND e.epoch = d.epoch
			WHERE `+decisionIs+` ORDER BY d.created_at, d.id`, eargs...)
	}
	if tg.spend {
		b.Queue(spendSQL(tg.episodeID()), tg.id, SpendWindow.Microseconds())
	}
}

func readLocks(br pgx.BatchResults, m *mtx, tg target) error {
	if _, err := br.Exec(); err != nil { // BEGIN
		return err
	}
	var err error
	m.ep, err = scanEpisode(br.QueryRow(), false, &m.now)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(tg.what)
	}
	if err != nil {
		return err
	}
	m.now = m.now.UTC()
	if tg.effect {
		e, err := scanEffect(br.QueryRow())
		switch {
		case errors.Is(err, pgx.ErrNoRows) && tg.effectID != uuid.Nil:
		case err != nil:
			return err
		default:
			m.lock(e)
		}
	}
	if tg.leaseMode != "" {
		l, err := scanLease(br.QueryRow())
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err == nil && l.EpisodeID == m.ep.ID {
			m.lease = &l
		}
	}
	if tg.decisions {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		m.decisions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Decision, error) { return scanDecision(r) })
		if err != nil {
			return err
		}
	}
	if tg.spend {
		s := &m.spent
		if err := br.QueryRow().Scan(&m.now, &s.Bytes, &s.Effects, &s.LastMinute); err != nil {
			return err
		}
		m.now = m.now.UTC()
	}
	return nil
}

// commit sends the queued writes, the ledger events, the episode row and
// COMMIT in one pipelined round trip. A transaction that changes something
// must say so in the ledger: queued writes without an event are a bug,
// refused here rather than committed unrecorded.
//
// Outcomes: a server error on any statement means the server skipped the
// rest, COMMIT included, so the transaction is known not to have
// committed. Any other failure once the pipeline is on the wire (a dead
// connection, a cancelled context) leaves the outcome unknown:
// authority_unavailable, never a guess.
//
// With next, the next transaction's BEGIN and locks follow the COMMIT in
// the same round trip; next is the mutation they started, or nil (with the
// first committed) when they failed — the connection is then left for the
// caller to roll back or discard.
func (m *mtx) commit(next *target) (committed bool, m2 *mtx, err error) {
	if len(m.events) == 0 && m.writes.Len() > 0 {
		return false, nil, protocol.Errorf(protocol.CodeInternal, "store: mutation without a ledger event")
	}
	if err := m.queueLedger(); err != nil {
		return false, nil, err
	}
	if m.lossy {
		// Whatever commits after this one and waits for its flush
		// flushes this one too: the WAL is one sequence, flushed as a
		// prefix.
		m.writes.Queue("SET LOCAL synchronous_commit = off")
	}
	m.writes.Queue("COMMIT")
	n := m.writes.Len()
	if next != nil {
		m.writes.Queue("BEGIN")
		queueLocks(&m.writes, *next)
	}
	br := m.tx.SendBatch(m.ctx, &m.writes)
	for i := 0; i < n; i++ {
		tag, err := br.Exec()
		if err == nil && i == n-1 && tag.String() != "COMMIT" {
			err = errors.New("store: COMMIT answered " + tag.String())
		}
		if err != nil {
			_ = br.Close()
			var pg *pgconn.PgError
			if errors.As(err, &pg) {
				return false, nil, err
			}
			return true, nil, protocol.Errorf(protocol.CodeAuthorityUnavailable, "commit outcome unknown: %w", err)
		}
	}
	if next == nil {
		if err := br.Close(); err != nil {
			return true, nil, protocol.Errorf(protocol.CodeAuthorityUnavailable, "commit outcome unknown: %w", err)
		}
		return true, nil, nil
	}
	// The COMMIT was answered: the first committed, whatever follows.
	m2 = &mtx{ctx: m.ctx, tx: m.tx, lossy: next.lossy}
	err = readLocks(br, m2, *next)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return true, nil, nil
	}
	return true, m2, nil
}

// queueLedger seals the pending events onto the episode's chain and queues
// them with the episode row (which carries the new head).
func (m *mtx) queueLedger() error {
	if len(m.events) == 0 {
		return nil
	}
	n := len(m.events)
	seqs, epochs := make([]int64, n), make([]int64, n)
	kinds, bodies := make([]string, n), make([]string, n)
	ats := make([]time.Time, n)
	prevs, hashes := make([][]byte, n), make([][]byte, n)
	head := m.ep.LedgerHead
	for i, ev := range m.events {
		e, err := ledger.Seal(head, m.ep.ID, ev.epoch, ev.kind, m.now, ev.body)
		if err != nil {
			return protocol.Errorf(protocol.CodeInternal, "store: %w", err)
		}
		seqs[i], epochs[i], kinds[i], bodies[i], ats[i] = e.Seq, e.Epoch, e.Kind, string(e.Body), e.At
		prevs[i], hashes[i] = e.Prev[:], e.Hash[:]
		head = ledger.Head{Seq: e.Seq, Hash: e.Hash}
	}
	m.ep.LedgerHead = head
	m.ep.UpdatedAt = m.now
	// One statement appends the events and moves the episode's head, so
	// neither can be sent without the other.
	args := []any{m.ep.ID, string(m.ep.State), m.ep.Epoch, m.ep.PolicyVersion, m.ep.CurrentCheckpoint,
		m.ep.Owner.InstanceID, m.ep.Owner.Token, m.ep.Owner.ExpiresAt, head.Seq, head.Hash[:], m.now, m.ep.Owner.process()}
	var rows string
	if n <= maxEventRows {
		// A few events (most mutations append one) go as rows of
		// scalars: the server inserts them for a fraction of what
		// unnesting seven arrays costs it.
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			p := len(args)
			fmt.Fprintf(&b, "($1, $%d::bigint, $%d::bigint, $%d::text, $%d::text, $%d::timestamptz, $%d::bytea, $%d::bytea)",
				p+1, p+2, p+3, p+4, p+5, p+6, p+7)
			args = append(args, seqs[i], epochs[i], kinds[i], bodies[i], ats[i], prevs[i], hashes[i])
		}
		rows = "VALUES " + b.String()
	} else {
		rows = `SELECT $1, * FROM unnest($13::bigint[], $14::bigint[], $15::text[], $16::text[],
				$17::timestamptz[], $18::bytea[], $19::bytea[])`
		args = append(args, seqs, epochs, kinds, bodies, ats, prevs, hashes)
	}
	m.writes.Queue(`WITH appended AS (
			INSERT INTO events (episode_id, seq, epoch, kind, body, at, prev_hash, hash) `+rows+`
		)
		UPDATE episodes SET state = $2, epoch = $3, policy_version = $4, current_checkpoint = $5,
			owner_instance = $6, owner_token = $7, owner_expires_at = $8, ledger_seq = $9, ledger_head = $10,
			updated_at = $11, owner_process = $12 WHERE id = $1`, args...)
	return nil
}

// maxEventRows is the most events the ledger statement sends as rows of
// scalars, one statement text per count; more are sent as arrays.
const maxEventRows = 4

// flush writes the queued statements and the ledger without committing,
// for the few operations that run inside run (creation, ownership).
func (m *mtx) flush() error {
	if len(m.events) == 0 && m.writes.Len() > 0 {
		return protocol.Errorf(protocol.CodeInternal, "store: mutation without a ledger event")
	}
	if err := m.queueLedger(); err != nil {
		return err
	}
	br := m.tx.SendBatch(m.ctx, &m.writes)
	for i := 0; i < m.writes.Len(); i++ {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
	}
	return br.Close()
}

// episodeLockCols is the episode without its spec: every mutation reads
// the episode under lock, and none needs the spec (up to 1 MiB) to do so.
const (
	episodeLockCols = `id, state, epoch, policy_version, current_checkpoint, owner_instance,
	owner_token, owner_expires_at, ledger_seq, ledger_head, created_at, updated_at, owner_process`
	episodeCols = `spec, ` + episodeLockCols
)

// lockEpisode locks an episode inside run (creation and ownership paths).
func lockEpisode(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Episode, time.Time, error) {
	var now time.Time
	ep, err := scanEpisode(tx.QueryRow(ctx, onEpisode(id).episodeSQL(), id), false, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return Episode{}, now, notFound("episode")
	}
	return ep, now.UTC(), err
}

// querier is what both a connection and a transaction offer.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// query runs a single-statement read outside an explicit transaction: one
// round trip, one snapshot.
func (p *Postgres) query(ctx context.Context, op string, fn func(querier) error) error {
	return once(func() error {
		conn, err := p.pool.acquire(ctx)
		if err != nil {
			return classify(op, err)
		}
		err = fn(conn)
		p.pool.release(conn, !connBroken(err) && conn.PgConn().TxStatus() == 'I')
		return classify(op, err)
	})
}
