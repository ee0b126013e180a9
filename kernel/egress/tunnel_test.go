package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/store"
)

// connect opens a CONNECT tunnel to host:443 through the proxy at r and
// returns the raw connection after the 200.
func connect(t *testing.T, r *running, host string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "CONNECT "+host+":443 HTTP/1.1\r\nHost: "+host+":443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", err, resp)
	}
	return c
}

// tunnelClient is a tool that trusts only the episode CA and goes through
// the proxy for https.
func tunnelClient(r *running) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(r.p.CACertPEM())
	pu, _ := url.Parse(r.url)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu),
		TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// TestTunnelSNIMustMatch: inside an admitted CONNECT example.com:443 the
// first record must be a ClientHello naming example.com without ECH;
// a ClientHello for another name (domain fronting), bytes that are not a
// ClientHello, and an ECH hello are each cut before any TLS is answered,
// recorded as refused and reported.
func TestTunnelSNIMustMatch(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, registry([]byte("x")))
	r := start(t, s, up.config("example.com", "other.example.org"))

	// A tunnel its tool closes before sending a byte asked for nothing:
	// it closes empty, neither refused nor reported.
	connect(t, r, "example.com").Close()
	if l := r.ledger(t, s); len(l) != 2 || l[1].Kind != store.EgressTunnel || l[1].Outcome != store.EgressFetched || l[1].Bytes != 0 {
		t.Fatalf("a tunnel closed unused: %+v", l)
	}

	// A ClientHello for other.example.org (allowlisted too) in a tunnel
	// admitted for example.com.
	c := connect(t, r, "example.com")
	tc := tls.Client(c, &tls.Config{ServerName: "other.example.org", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("a ClientHello naming another host was answered")
	}
	// A record that is not a handshake (application data carrying a
	// ClientHello's bytes) where the ClientHello must be.
	c = connect(t, r, "example.com")
	rec := helloRecord(t, "example.com")
	rec[0] = 0x17
	c.Write(rec)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _ := c.Read(make([]byte, 1)); n != 0 {
		t.Fatal("a tunnel that did not start with a ClientHello was answered")
	}
	// ECH: a real ClientHello with an encrypted_client_hello extension.
	c = connect(t, r, "example.com")
	c.Write(echHello(t, "example.com"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _ := c.Read(make([]byte, 1)); n != 0 {
		t.Fatal("an ECH ClientHello was answered")
	}
	// The right name is served.
	if code, b, _ := get(t, tunnelClient(r), "https://example.com/m/@v/list"); code != 200 || string(b) != "v1.0.0\n" {
		t.Fatalf("matching SNI: %d %q", code, b)
	}
	r.p.Close()
	var refused []string
	for _, f := range r.ledger(t, s) {
		if f.Outcome == store.EgressRefused {
			refused = append(refused, f.Reason)
		}
	}
	want := []string{errSNIMismatch.Error(), errNotHello.Error(), errECH.Error()}
	if strings.Join(refused, "|") != strings.Join(want, "|") {
		t.Fatalf("refused rows %q, want %q", refused, want)
	}
	if len(r.refusals()) != 3 {
		t.Fatalf("reported %+v", r.refusals())
	}
}

// echHello is a ClientHello for sni as crypto/tls writes it, with an
// encrypted_client_hello extension (0xfe0d) appended.
func echHello(t *testing.T, sni string) []byte {
	t.Helper()
	rec := helloRecord(t, sni)
	ext := []byte{0xfe, 0x0d, 0, 1, 0}
	body := append([]byte(nil), rec[5:]...)
	// Grow the extensions vector, the handshake length and the record
	// length by len(ext); the extensions vector ends the message.
	hl := int(body[1])<<16 | int(body[2])<<8 | int(body[3]) + len(ext)
	body[1], body[2], body[3] = byte(hl>>16), byte(hl>>8), byte(hl)
	off := extOffset(body)
	el := int(body[off])<<8 | int(body[off+1]) + len(ext)
	body[off], body[off+1] = byte(el>>8), byte(el)
	body = append(body, ext...)
	hdr := []byte{0x16, 3, 1, byte(len(body) >> 8), byte(len(body))}
	return append(hdr, body...)
}

// helloRecord is the first record crypto/tls sends for sni.
func helloRecord(t *testing.T, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	rec, _, err := readHello(b)
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// extOffset is where a ClientHello's extensions length sits.
func extOffset(b []byte) int {
	c := cursor(b[4:])
	c.skip(34)
	c.vec8skip()
	c.vec16skip()
	c.vec8skip()
	return len(b) - len(c)
}

// TestTunnelInnerRequestsAdmitted: inside a terminated tunnel, a PUT and a
// POST are refused by the plain-HTTP admission (forbidden, recorded), a
// request naming another Host is refused, and a GET of an immutable
// module zip is served (the tool verifying the leaf against the episode CA),
// filed in the cache, and the second GET is a cache hit upstream never
// sees.
func TestTunnelInnerRequestsAdmitted(t *testing.T) {
	s := openStore(t)
	body := modZip(t, "golang.org/x/m", "v1.0.0", 32<<10)
	up := newUpstream(t, registry(body))
	cache, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := up.config("example.com", "other.example.org")
	cfg.Cache = cache
	r := start(t, s, cfg)
	c := tunnelClient(r)
	const tgz = "https://example.com/golang.org/x/m/@v/v1.0.0.zip"
	for _, m := range []string{http.MethodPut, http.MethodPost} {
		req, _ := http.NewRequest(m, tgz, strings.NewReader("upload"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s inside TLS: %d", m, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, tgz, nil)
	req.Host = "other.example.org"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another Host inside the tunnel: %d", resp.StatusCode)
	}
	for i := 0; i < 2; i++ {
		if code, b, _ := get(t, c, tgz); code != 200 || !bytes.Equal(b, body) {
			t.Fatalf("GET %d: %d, %d bytes", i, code, len(b))
		}
	}
	if n := up.count("/golang.org/x/m/@v/v1.0.0.zip"); n != 1 {
		t.Fatalf("upstream saw the tarball %d times", n)
	}
	c.CloseIdleConnections()
	r.p.Close()
	var got []string
	for _, f := range r.ledger(t, s) {
		got = append(got, string(f.Kind)+" "+f.Method+" "+string(f.Outcome))
	}
	want := []string{"http PUT refused", "http POST refused", "http GET refused", "http GET fetched", "http GET cached"}
	var inner []string
	for _, g := range got {
		if strings.HasPrefix(g, "http ") {
			inner = append(inner, g)
		}
	}
	if strings.Join(inner, "|") != strings.Join(want, "|") {
		t.Fatalf("inner rows %q, want %q", inner, want)
	}
}

// TestTunnelHoldsOneSlot: a terminated tunnel takes one of the episode's
// concurrency slots, and the requests inside it ride on that slot (one at
// a time), not on a second: with one slot, a tunnel's GET is served, while
// a second tunnel meanwhile is refused as saturated. (Counted twice, npm's
// parallel tunnels saturated the proxy at half its bound.)
func TestTunnelHoldsOneSlot(t *testing.T) {
	s := openStore(t)
	body := modZip(t, "golang.org/x/m", "v1.0.0", 4<<10)
	up := newUpstream(t, registry(body))
	cfg := up.config("example.com")
	cfg.MaxConcurrent = 1
	r := start(t, s, cfg)
	c := tunnelClient(r)
	const zip = "https://example.com/golang.org/x/m/@v/v1.0.0.zip"
	for i := 0; i < 2; i++ {
		if code, b, _ := get(t, c, zip); code != 200 || !bytes.Equal(b, body) {
			t.Fatalf("GET %d inside the only slot's tunnel: %d, %d bytes", i, code, len(b))
		}
	}
	// The first tunnel is still open (kept alive): it holds the slot.
	other, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	io.WriteString(other, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(other), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a second tunnel beyond the one slot: %v %v", err, resp)
	}
	c.CloseIdleConnections()
}
