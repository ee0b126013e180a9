package egress

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/store"
)

// TestOutboundBytesCapped: the 5 MiB upload a worker sent through a
// CONNECT tunnel (issue 22) finds no way out: inside the terminated
// tunnel the PUT is refused and reaches nothing, and what a domain can
// still send, paths, queries and header values of admitted GETs over
// plain HTTP and inside TLS alike, is charged to MaxUpBytes: once spent,
// requests are refused before they leave, the upstream has seen no more
// than the cap, and the refusal is recorded as limit_exceeded.
func TestOutboundBytesCapped(t *testing.T) {
	s := openStore(t)
	var received atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n + int64(len(r.Method)+len(r.URL.RequestURI())))
		for _, vs := range r.Header {
			for _, v := range vs {
				received.Add(int64(len(v)))
			}
		}
		w.Write([]byte("ok\n"))
	})
	cfg := up.config("example.com")
	cfg.MaxBytes = 64 << 20
	cfg.MaxUpBytes = 64 << 10
	r := start(t, s, cfg)
	tc := tunnelClient(r)
	payload := bytes.Repeat([]byte("exfiltrated "), (5<<20)/12)
	req, _ := http.NewRequest(http.MethodPut, "https://example.com/upload", bytes.NewReader(payload))
	req.Header.Set("Authorization", "Bearer attacker-token")
	if resp, err := tc.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("a PUT inside the tunnel: %d, want 403", resp.StatusCode)
		}
	}
	if n := received.Load(); n != 0 {
		t.Fatalf("the upstream received %d bytes of a refused upload", n)
	}
	// Data in query strings, 2 KiB a request, half inside TLS, half plain.
	pc := client(r.url)
	chunk := strings.Repeat("d", 2000)
	var last int
	for i := range 200 {
		c, scheme := pc, "http"
		if i%2 == 1 {
			c, scheme = tc, "https"
		}
		resp, err := c.Get(scheme + "://example.com/search?q=" + chunk)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		last = resp.StatusCode
		if last != http.StatusOK {
			break
		}
	}
	if last != http.StatusForbidden {
		t.Fatalf("200 requests of 2 KiB went out under a 64 KiB outbound cap (last status %d)", last)
	}
	if n := received.Load(); n > cfg.MaxUpBytes || n < cfg.MaxUpBytes/2 {
		t.Fatalf("the upstream received %d bytes of requests, want at most the %d outbound cap (and most of it)", n, cfg.MaxUpBytes)
	}
	tc.CloseIdleConnections()
	r.p.Close()
	var capped bool
	for _, f := range r.ledger(t, s) {
		if f.Kind == store.EgressHTTP && f.Code == "limit_exceeded" && strings.Contains(f.Reason, "outbound") {
			capped = true
		}
	}
	if !capped {
		t.Fatalf("no ledger row says the outbound cap refused a request")
	}
}

// TestHeadFloodCharged: requests that move no body still spend the cap
// (every request pays RequestFloor, HEAD and refusals of the budget
// included), the request budget ends a flood outright, and the ledger
// takes at most maxRefusalRows refusal rows however long it goes on.
func TestHeadFloodCharged(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, registry([]byte("zip body")))
	cfg := up.config("example.com")
	cfg.MaxBytes = 1 << 20
	cfg.MaxRequests = 500
	r := start(t, s, cfg)
	c := client(r.url)
	ok, refused := 0, 0
	for i := range 2000 {
		req, _ := http.NewRequest(http.MethodHead, "http://example.com/golang.org/x/m/@v/list?"+strings.Repeat("q", i%7), nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusForbidden:
			refused++
		}
	}
	r.p.Close()
	used, _ := s.EgressUsed(t.Context(), r.episode)
	if ok != 500 || refused != 1500 {
		t.Fatalf("%d served, %d refused: want the budget of 500, then refusals", ok, refused)
	}
	if used < int64(ok)*DefaultRequestFloor {
		t.Fatalf("%d HEADs charged %d bytes, want at least %d", ok, used, int64(ok)*DefaultRequestFloor)
	}
	rows := r.ledger(t, s)
	if n := len(rows); n > ok+maxRefusalRows {
		t.Fatalf("%d ledger rows for %d served requests: the refusals were not bounded", n, ok)
	}
}

// TestEgressConnectionsBounded: the proxy keeps at most twice its
// concurrency in connections open (finding 8: 1,500 half-open requests
// held 3,000 kernel descriptors); one over is closed at once, and a
// closed connection frees its place.
func TestEgressConnectionsBounded(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, registry(nil))
	cfg := up.config("example.com")
	cfg.MaxConcurrent = 2
	r := start(t, s, cfg)
	addr := strings.TrimPrefix(r.url, "http://")
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET http://example.com/x HTTP/1.1\r\n") // half a request
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // the four accepted before the fifth
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a connection beyond the cap was kept open: %v", err)
	}
	held[0].Close()
	time.Sleep(100 * time.Millisecond)
	if code, _, _ := get(t, client(r.url), "http://example.com/golang.org/x/m/@v/list"); code != http.StatusOK {
		t.Fatalf("after one closed, a request: %d", code)
	}
}
