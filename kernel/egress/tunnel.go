package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// tunnel serves an admitted CONNECT host:443 by terminating TLS with a
// leaf of the episode CA: the first record must be a ClientHello naming
// host (no ECH), and every request inside is admitted, fetched, cached,
// charged and recorded exactly as a plain-HTTP one. No byte is relayed:
// what leaves is only what admit lets a plain request send.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, q request, start time.Time) {
	f := store.EgressFetch{Kind: store.EgressTunnel, Method: q.method, Host: q.host}
	// The opening row is written, not queued, before the 200: a kernel
	// that dies while the tunnel is open leaves the row that says so.
	opened := f
	opened.EpisodeID, opened.Outcome, opened.Status = p.cfg.EpisodeID, store.EgressOpened, http.StatusOK
	octx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	err := p.cfg.Ledger.RecordEgress(octx, opened)
	cancel()
	if err != nil {
		p.refuse(w, r.Context(), f, &refusal{code: protocol.CodeAuthorityUnavailable, status: http.StatusServiceUnavailable,
			reason: "the egress ledger is unavailable: no tunnel opens unrecorded"}, start)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		p.fail(w, r.Context(), f, &refusal{code: protocol.CodeInternal, status: http.StatusInternalServerError, reason: "cannot tunnel"}, start)
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer down.Close()
	if !p.track(down) {
		return
	}
	defer p.untrack(down)
	ctx := context.WithoutCancel(r.Context())
	if _, err := rw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n"); err != nil || rw.Flush() != nil {
		return
	}
	f.Status = http.StatusOK
	down.SetReadDeadline(time.Now().Add(30 * time.Second))
	rec, sni, err := readHello(rw.Reader)
	if err == errHungUp {
		// A tool that hung up before sending anything asked for nothing
		// (Go's transport, say, abandoning a dial it raced): the tunnel
		// closes empty, not refused, and is no drift.
		f.Outcome = store.EgressFetched
		p.record(ctx, f, start)
		return
	}
	if err == nil && sni != q.host {
		err = errSNIMismatch
	}
	if err != nil {
		// The tool gets no TLS alert it could mistake for the registry's:
		// the connection is cut and the refusal recorded.
		p.refuse(nil, ctx, f, refuse(protocol.CodeForbidden, err.Error()), start)
		return
	}
	down.SetReadDeadline(time.Time{})
	leaf, err := p.ca.leaf(q.host)
	if err != nil {
		p.fail(nil, ctx, f, &refusal{code: protocol.CodeInternal, reason: "leaf: " + err.Error()}, start)
		return
	}
	inner := &replayConn{Conn: down, r: io.MultiReader(bytes.NewReader(rec), rw.Reader)}
	tc := tls.Server(inner, &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
	})
	l := &oneConn{c: tc, closed: make(chan struct{})}
	srv := &http.Server{
		Handler:           p.innerHandler(q.host),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       2 * time.Minute,
	}
	srv.Serve(l)
	// The row closes the tunnel with its raw counts; the bytes served
	// were charged by each inner fetch, which has its own row.
	f.Outcome, f.Bytes, f.BytesUp = store.EgressFetched, inner.in.Load(), inner.out.Load()+int64(len(rec))
	p.record(ctx, f, start)
}

var errSNIMismatch = errorString("the ClientHello names another server than the CONNECT host")

type errorString string

func (e errorString) Error() string { return string(e) }

// inTunnel marks a request served inside a terminated tunnel: the
// tunnel's concurrency slot covers it, since its connection serves one
// request at a time (HTTP/1.1 only, no pipelining past the server).
type inTunnel struct{}

// innerHandler serves one request inside a terminated tunnel: it must name
// the CONNECT host and is then handed to ServeHTTP in absolute form, so
// admission (GET/HEAD, no body, canonical path), the cache, the caps and
// the ledger are the plain-HTTP ones, not a second copy of them.
func (p *Proxy) innerHandler(host string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := strings.ToLower(r.Host)
		if hh, port, err := net.SplitHostPort(h); err == nil && port == "443" {
			h = hh
		}
		if r.Method == http.MethodConnect || h != host || r.URL == nil || r.URL.IsAbs() {
			// Another host inside an admitted tunnel would be a way past
			// the allowlist (domain fronting); refuse it as admit would.
			p.wg.Add(1)
			defer p.wg.Done()
			p.refuse(w, r.Context(), store.EgressFetch{Kind: store.EgressHTTP, Method: r.Method, Host: host},
				refuse(protocol.CodeForbidden, "a request inside a tunnel must name the tunnel's host"), time.Now())
			return
		}
		r.URL.Scheme, r.URL.Host = "http", host
		r.Host = host
		p.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), inTunnel{}, true)))
	})
}

// track registers a hijacked conn so Close cuts it; false once closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.tunnels == nil {
		p.tunnels = map[net.Conn]bool{}
	}
	p.tunnels[c] = true
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.tunnels, c)
	p.mu.Unlock()
}

// replayConn reads the ClientHello already consumed, then the rest.
// It counts the tunnel's raw bytes both ways for the tunnel's row.
type replayConn struct {
	net.Conn
	r       io.Reader
	in, out atomic.Int64
}

func (c *replayConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.out.Add(int64(n))
	return n, err
}

func (c *replayConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.in.Add(int64(n))
	return n, err
}

// oneConn is a listener that yields one conn, then blocks until it is
// closed, so Serve returns only when the tunnel is done.
type oneConn struct {
	c      net.Conn
	once   sync.Once
	given  bool
	closed chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	if !l.given {
		l.given = true
		return &closeNotify{Conn: l.c, l: l}, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

type closeNotify struct {
	net.Conn
	l *oneConn
}

func (c *closeNotify) Close() error {
	err := c.Conn.Close()
	c.l.Close()
	return err
}
