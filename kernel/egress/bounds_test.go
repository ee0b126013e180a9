package egress

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/autonomic-kernel/autonomic/store"
)

// TestOutboundBytesCapped: the 5 MiB upload a worker sent through a
// CONNECT tunnel under a 1 MiB inbound cap (issue 22) now meets an
// outbound cap: the tunnel is cut once the domain has sent MaxUpBytes,
// the upstream receives no more than that, and the ledger row says so.
func TestOutboundBytesCapped(t *testing.T) {
	s := openStore(t)
	var received atomic.Int64
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
		w.Write([]byte("stored\n"))
	})
	cfg := up.config("example.com")
	cfg.MaxBytes = 1 << 20
	cfg.MaxUpBytes = 256 << 10
	r := start(t, s, cfg)
	roots := x509.NewCertPool()
	roots.AddCert(up.srv.Certificate())
	pu, _ := url.Parse(r.url)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	payload := bytes.Repeat([]byte("exfiltrated "), (5<<20)/12)
	req, _ := http.NewRequest(http.MethodPut, "https://example.com/upload", bytes.NewReader(payload))
	req.Header.Set("Authorization", "Bearer attacker-token")
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("a 5 MiB upload went through a tunnel under a 256 KiB outbound cap (%d received)", received.Load())
		}
	}
	if n := received.Load(); n > cfg.MaxUpBytes {
		t.Fatalf("the upstream received %d bytes, over the %d outbound cap", n, cfg.MaxUpBytes)
	}
	r.p.Close()
	var row *store.EgressFetch
	for _, f := range r.ledger(t, s) {
		if f.Kind == store.EgressTunnel {
			row = &f
		}
	}
	if row == nil || row.BytesUp > cfg.MaxUpBytes || row.Code != "limit_exceeded" {
		t.Fatalf("tunnel row %+v", row)
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
