package entry

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Listen opens the bridge's loopback listener. Parse admits loopback
// addresses only; Listen checks again, as it is what binds.
func (b Bridge) Listen() (net.Listener, error) {
	if !b.Addr.Addr().IsLoopback() {
		return nil, fmt.Errorf("bridge %s: not a loopback address", b.Addr)
	}
	return net.Listen("tcp", b.Addr.String())
}

// Serve forwards every connection ln accepts to a new connection on the
// bridge's Unix socket until ln is closed.
func (b Bridge) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go b.forward(c)
	}
}

func (b Bridge) forward(c net.Conn) {
	defer c.Close()
	u, err := net.Dial("unix", b.Socket)
	if err != nil {
		// The bridges carry HTTP: an agent reports a 502 more clearly
		// than a reset connection.
		msg := "autonomic-entry: " + b.Socket + " is unreachable\n"
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
		return
	}
	defer u.Close()
	var wg sync.WaitGroup
	for _, p := range [][2]net.Conn{{u, c}, {c, u}} {
		wg.Add(1)
		go func(dst, src net.Conn) {
			defer wg.Done()
			_, _ = io.Copy(dst, src)
			// Half-close: the peer reads EOF, and may still answer.
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}(p[0], p[1])
	}
	wg.Wait()
}
