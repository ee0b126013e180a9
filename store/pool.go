package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// pool is a small bounded connection pool. It exists instead of pgxpool to
// keep the store's dependencies to pgx itself, and because its one policy
// matters here: a connection whose last use failed in a way that leaves its
// state unknown is closed, never reused, and every idle connection is
// dropped with it (a failure of one usually means the server restarted,
// and a stale idle connection would only fail the next caller). For the
// same reason a connection idle longer than idlePing is pinged before it is
// handed out: a server restarted while nobody used the store must not fail
// the first caller after it with authority_unavailable.
type pool struct {
	cfg   *pgx.ConnConfig
	slots chan struct{} // one token per connection that may exist

	mu     sync.Mutex
	idle   []idleConn
	closed bool
}

type idleConn struct {
	c     *pgx.Conn
	since time.Time
}

// idlePing is how long a connection may sit idle before it is pinged
// before reuse (pgxpool's default too): a round trip only after a pause.
const idlePing = time.Second

var errPoolClosed = errors.New("store: closed")

func newPool(cfg *pgx.ConnConfig, max int) *pool {
	return &pool{cfg: cfg, slots: make(chan struct{}, max)}
}

func (p *pool) acquire(ctx context.Context) (*pgx.Conn, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, errPoolClosed
	}
	for len(p.idle) > 0 {
		ic := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if ic.c.IsClosed() {
			continue
		}
		if time.Since(ic.since) < idlePing {
			p.mu.Unlock()
			return ic.c, nil
		}
		p.mu.Unlock()
		if p.alive(ctx, ic.c) {
			return ic.c, nil
		}
		// Dead: so, most likely, is every other idle connection.
		p.mu.Lock()
		drop := append(p.idle, ic)
		p.idle = nil
		p.mu.Unlock()
		closeAll(drop)
		p.mu.Lock()
	}
	p.mu.Unlock()
	c, err := pgx.ConnectConfig(ctx, p.cfg)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return c, nil
}

// release returns c to the pool, or closes it (and every idle connection)
// when healthy is false.
func (p *pool) release(c *pgx.Conn, healthy bool) {
	defer func() { <-p.slots }()
	p.mu.Lock()
	if healthy && !p.closed && !c.IsClosed() && c.PgConn().TxStatus() == 'I' {
		p.idle = append(p.idle, idleConn{c: c, since: time.Now()})
		p.mu.Unlock()
		return
	}
	drop := append(p.idle, idleConn{c: c})
	p.idle = nil
	p.mu.Unlock()
	closeAll(drop)
}

// alive pings c, bounded so a server that does not answer costs the caller
// at most a second before a fresh connection is tried.
func (p *pool) alive(ctx context.Context, c *pgx.Conn) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.Ping(ctx) == nil
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	drop := p.idle
	p.idle = nil
	p.mu.Unlock()
	closeAll(drop)
}

func closeAll(cs []idleConn) {
	for _, ic := range cs {
		// Bounded: a dead server must not hold up the caller.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = ic.c.Close(ctx)
		cancel()
	}
}
