package relay

import (
	"net"
	"sync"
	"time"
)

// Default connection bounds of one relay (Options.ReadTimeout,
// Options.IdleTimeout).
const (
	defaultReadTimeout = 2 * time.Minute
	defaultIdleTimeout = 30 * time.Second
)

// maxConns is how many connections a relay keeps open: the calls it may
// have in flight, and as many again waiting or idle.
func (o Options) maxConns() int {
	n := o.MaxConcurrent
	if n <= 0 {
		n = 8
	}
	return 2 * n
}

// limitListener accepts a connection only while fewer than cap(slots) are
// open; one over is closed at once, so a worker opening connections
// without end holds no more of the kernel than that.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
		default:
			c.Close()
		}
	}
}

type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
