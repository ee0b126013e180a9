// Package connlimit bounds the connections a server holds open for a
// peer it does not trust (a domain's worker on the kernel's sockets).
//
// Invariant: a Listener returns a connection only while fewer than its
// limit are open; one over the limit is closed at once, never queued, so
// a worker opening connections without end holds no more of the kernel
// than the limit. A slot is freed exactly once, when the connection is
// closed (a hijacked connection included).
package connlimit

import (
	"net"
	"sync"
)

// Listen wraps l so that at most n connections it accepted are open.
func Listen(l net.Listener, n int) net.Listener {
	if n <= 0 {
		n = 1
	}
	return &listener{Listener: l, slots: make(chan struct{}, n)}
}

type listener struct {
	net.Listener
	slots chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &conn{Conn: c, free: func() { <-l.slots }}, nil
		default:
			c.Close()
		}
	}
}

type conn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
