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
// and a stale idle connection would only fail the next caller).
type pool struct {
	cfg   *pgx.ConnConfig
	slots chan struct{} // one token per connection that may exist

	mu     sync.Mutex
	idle   []*pgx.Conn
	closed bool
}

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
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if !c.IsClosed() {
			p.mu.Unlock()
			return c, nil
		}
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
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	drop := append(p.idle, c)
	p.idle = nil
	p.mu.Unlock()
	closeAll(drop)
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	drop := p.idle
	p.idle = nil
	p.mu.Unlock()
	closeAll(drop)
}

func closeAll(cs []*pgx.Conn) {
	for _, c := range cs {
		// Bounded: a dead server must not hold up the caller.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Close(ctx)
		cancel()
	}
}
