package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/store"
)

// registry serves immutable module objects, a mutable listing, a
// redirect elsewhere and one to itself.
func registry(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" || r.Header.Get("Cookie") != "" {
			http.Error(w, "credential forwarded", http.StatusTeapot)
			return
		}
		switch {
		case r.URL.Path == "/away":
			http.Redirect(w, r, "https://other.example.org/x", http.StatusFound)
		case r.URL.Path == "/moved":
			http.Redirect(w, r, "https://example.com/m/@v/v1.0.0.mod", http.StatusMovedPermanently)
		case strings.HasSuffix(r.URL.Path, "/@v/list"):
			io.WriteString(w, "v1.0.0\n")
		case strings.HasPrefix(r.URL.Path, "/sumdb/sum.golang.org/lookup/"):
			lookup(w, r, body)
		case strings.HasSuffix(r.URL.Path, ".zip"), strings.HasSuffix(r.URL.Path, ".tgz"):
			w.Header().Set("Content-Type", "application/zip")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		case strings.HasSuffix(r.URL.Path, ".mod"):
			io.WriteString(w, goModBody)
		default:
			http.NotFound(w, r)
		}
	}
}

func get(t *testing.T, c *http.Client, u string) (int, []byte, http.Header) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s body: %v", u, err)
	}
	return resp.StatusCode, b, resp.Header
}

// TestCacheServesSecondEpisode: a second episode's fetch of an immutable
// module object is served from the shared cache — the upstream counts one
// request — while a mutable listing goes upstream each time. Each fetch is
// in its episode's ledger with the body's digest.
func TestCacheServesSecondEpisode(t *testing.T) {
	s := openStore(t)
	body := modZip(t, "golang.org/x/m", "v1.0.0", 550000) // 550 kB: several meter reads
	up := newUpstream(t, registry(body))
	cache, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := up.config("example.com")
	cfg.Cache = cache
	a, b := start(t, s, cfg), start(t, s, cfg)
	const zip = "http://example.com/golang.org/x/m/@v/v1.0.0.zip"
	sum := sha256.Sum256(body)
	for _, r := range []*running{a, b} {
		code, got, _ := get(t, client(r.url), zip)
		if code != 200 || !bytes.Equal(got, body) {
			t.Fatalf("zip: %d, %d bytes", code, len(got))
		}
		if code, got, _ := get(t, client(r.url), "http://example.com/golang.org/x/m/@v/list"); code != 200 || string(got) != "v1.0.0\n" {
			t.Fatalf("list: %d %q", code, got)
		}
	}
	if n := up.count("/golang.org/x/m/@v/v1.0.0.zip"); n != 1 {
		t.Fatalf("the upstream served the immutable zip %d times, want 1", n)
	}
	if n := up.count("/golang.org/x/m/@v/list"); n != 2 {
		t.Fatalf("the upstream served the mutable list %d times, want 2", n)
	}
	for i, r := range []*running{a, b} {
		// Close waits for every ledger row (they are written after the
		// response, in any order) and gives back the bank's unused
		// reservation.
		r.p.Close()
		l := r.ledger(t, s)
		if len(l) != 2 {
			t.Fatalf("episode %d ledger: %+v", i, l)
		}
		z, list := l[0], l[1]
		if z.Path != "/golang.org/x/m/@v/v1.0.0.zip" {
			z, list = l[1], l[0]
		}
		want := []string{store.EgressFetched, store.EgressCached}[i]
		if z.Outcome != want || z.Host != "example.com" || z.Path != "/golang.org/x/m/@v/v1.0.0.zip" || z.Status != 200 ||
			z.Bytes != int64(len(body)) || z.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("episode %d zip row: %+v", i, z)
		}
		if list.Path != "/golang.org/x/m/@v/list" || list.Outcome != store.EgressFetched || list.Bytes != 7 {
			t.Fatalf("episode %d list row: %+v", i, list)
		}
		used, err := s.EgressUsed(t.Context(), r.episode)
		if err != nil || used != int64(len(body))+7+2*DefaultRequestFloor {
			t.Fatalf("episode %d charged %d bytes, want %d (%v)", i, used, int64(len(body))+7+2*DefaultRequestFloor, err)
		}
	}
}

// TestRefusals: every kind of request the proxy must not forward is
// refused with 403 and a reason the tool prints, never reaches the
// upstream, is in the ledger as refused and is reported to OnRefused.
func TestRefusals(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, registry([]byte("zip")))
	r := start(t, s, up.config("example.com"))
	addr := strings.TrimPrefix(r.url, "http://")
	raw := func(req string) (int, string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", req, err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cases := []struct{ name, req, code, says string }{
		{"POST", "POST http://example.com/upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n", "forbidden", "method POST"},
		{"PUT", "PUT http://example.com/-/pkg HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n", "forbidden", "method PUT"},
		{"DELETE", "DELETE http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n", "forbidden", "method DELETE"},
		{"body", "GET http://example.com/m/@v/list HTTP/1.1\r\nHost: example.com\r\nContent-Length: 4\r\n\r\nleak", "forbidden", "bodies are refused"},
		{"chunked body", "GET http://example.com/m/@v/list HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nleak\r\n0\r\n\r\n", "forbidden", "bodies are refused"},
		{"CONNECT 22", "CONNECT example.com:22 HTTP/1.1\r\nHost: example.com:22\r\n\r\n", "forbidden", "port 443 only"},
		{"CONNECT 80", "CONNECT example.com:80 HTTP/1.1\r\nHost: example.com:80\r\n\r\n", "forbidden", "port 443 only"},
		{"CONNECT off list", "CONNECT github.com:443 HTTP/1.1\r\nHost: github.com:443\r\n\r\n", "forbidden", "not on the policy's egress allowlist"},
		{"host off list", "GET http://evil.example.org/x HTTP/1.1\r\nHost: evil.example.org\r\n\r\n", "forbidden", "not on the policy's egress allowlist"},
		{"ip literal", "GET http://127.0.0.1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "forbidden", "not on the policy's egress allowlist"},
		{"other port", "GET http://example.com:8080/x HTTP/1.1\r\nHost: example.com\r\n\r\n", "forbidden", "port 80 only"},
		{"origin form", "GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n", "invalid_field", "absolute form"},
		{"dot segment", "GET http://example.com/a/%2e%2e/b HTTP/1.1\r\nHost: example.com\r\n\r\n", "invalid_field", "not canonical"},
		{"redirect elsewhere", "GET http://example.com/away HTTP/1.1\r\nHost: example.com\r\n\r\n", "redirect_refused", "other.example.org"},
	}
	for _, c := range cases {
		status, body := raw(c.req)
		if status != http.StatusForbidden || !strings.Contains(body, c.says) || !strings.Contains(body, "("+c.code+")") {
			t.Errorf("%s: %d %q", c.name, status, body)
		}
	}
	// Only the redirect reached the upstream (it had to, to see it).
	if n := up.hits.Load(); n != 1 || up.count("/away") != 1 {
		t.Fatalf("the upstream saw %d requests", n)
	}
	// A redirect to an allowlisted host is passed on, not followed.
	status, _, h := get(t, client(r.url), "http://example.com/moved")
	if status != http.StatusMovedPermanently || h.Get("Location") != "https://example.com/m/@v/v1.0.0.mod" || up.count("/m/@v/v1.0.0.mod") != 0 {
		t.Fatalf("allowlisted redirect: %d %q", status, h.Get("Location"))
	}
	// Credentials the tool adds are not forwarded.
	req, _ := http.NewRequest("GET", "http://example.com/m/@v/v1.0.0.mod", nil)
	req.Header.Set("Authorization", "Bearer stolen")
	req.Header.Set("Cookie", "session=1")
	resp, err := client(r.url).Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request with credentials: %v %v", err, resp)
	}
	resp.Body.Close()

	l := r.ledger(t, s)
	refused := 0
	for _, f := range l {
		if f.Outcome == store.EgressRefused {
			refused++
			if f.Status != 403 || f.Code == "" || f.Reason == "" {
				t.Errorf("refused row: %+v", f)
			}
		}
	}
	if refused != len(cases) || len(r.refusals()) != len(cases) || len(l) != len(cases)+2 {
		t.Fatalf("ledger %d rows, %d refused; %d signals; want %d refused", len(l), refused, len(r.refusals()), len(cases))
	}
}

// TestCapStopsFetches: bytes count against the episode's cap; a fetch
// that does not fit is refused with limit_exceeded before any byte is
// sent, and so is every later one.
func TestCapStopsFetches(t *testing.T) {
	s := openStore(t)
	body := bytes.Repeat([]byte("x"), 400<<10)
	up := newUpstream(t, registry(body))
	cfg := up.config("example.com")
	cfg.MaxBytes = 1 << 20
	r := start(t, s, cfg)
	c := client(r.url)
	for i := range 2 {
		if code, got, _ := get(t, c, "http://example.com/m/@v/v1.0."+string(rune('0'+i))+".zip"); code != 200 || len(got) != len(body) {
			t.Fatalf("fetch %d: %d", i, code)
		}
	}
	for i := range 2 {
		code, got, _ := get(t, c, "http://example.com/m/@v/v1.0.9.zip")
		if code != http.StatusForbidden || !strings.Contains(string(got), "byte cap is reached") {
			t.Fatalf("over the cap, try %d: %d %q", i, code, got)
		}
	}
	r.p.Close()
	used, _ := s.EgressUsed(t.Context(), r.episode)
	// Two bodies, and the floor of each of the four requests.
	if used != 2*int64(len(body))+4*DefaultRequestFloor {
		t.Fatalf("charged %d", used)
	}
	if n := len(r.refusals()); n != 2 {
		t.Fatalf("%d cap signals", n)
	}
}

// TestCorruptCacheIsNotServed: a cached blob changed on disk is cut off
// mid-response (the tool sees an error, not a wrong body), evicted, and
// the next fetch goes upstream again.
func TestCorruptCacheIsNotServed(t *testing.T) {
	s := openStore(t)
	body := modZip(t, "golang.org/x/m", "v1.0.0", 200<<10)
	up := newUpstream(t, registry(body))
	dir := t.TempDir()
	cache, _ := OpenCache(dir)
	cfg := up.config("example.com")
	cfg.Cache = cache
	r := start(t, s, cfg)
	const u = "http://example.com/golang.org/x/m/@v/v1.0.0.zip"
	get(t, client(r.url), u)
	// Served once from the cache: read whole, found to match, remembered
	// (the next serve of the same file skips the hash) — until it changes.
	if code, got, _ := get(t, client(r.url), u); code != 200 || !bytes.Equal(got, body) || up.count("/golang.org/x/m/@v/v1.0.0.zip") != 1 {
		t.Fatalf("second fetch: %d, upstream %d", code, up.count("/golang.org/x/m/@v/v1.0.0.zip"))
	}
	r.p.wg.Wait()
	sum := sha256.Sum256(body)
	blob := filepath.Join(dir, "blobs", hex.EncodeToString(sum[:]))
	bad := bytes.Clone(body)
	bad[len(bad)-1] = 'Z'
	if err := os.WriteFile(blob, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := client(r.url).Get(u)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a corrupt cached body was served whole")
	}
	if code, got, _ := get(t, client(r.url), u); code != 200 || !bytes.Equal(got, body) || up.count("/golang.org/x/m/@v/v1.0.0.zip") != 2 {
		t.Fatalf("after eviction: %d, upstream %d", code, up.count("/golang.org/x/m/@v/v1.0.0.zip"))
	}
}

func TestCacheable(t *testing.T) {
	for _, c := range []struct {
		host, path string
		want       bool
	}{
		{"proxy.golang.org", "/github.com/google/uuid/@v/v1.6.0.zip", true},
		{"proxy.golang.org", "/github.com/google/uuid/@v/v1.6.0.mod", true},
		{"proxy.golang.org", "/github.com/google/uuid/@v/v1.6.0.info", true},
		{"proxy.golang.org", "/github.com/google/uuid/@v/list", false},
		{"proxy.golang.org", "/github.com/google/uuid/@latest", false},
		{"proxy.golang.org", "/sumdb/sum.golang.org/tile/8/0/x123/456", true},
		{"proxy.golang.org", "/sumdb/sum.golang.org/tile/8/0/x123/456.p/7", false},
		{"proxy.golang.org", "/sumdb/sum.golang.org/latest", false},
		{"proxy.golang.org", "/sumdb/sum.golang.org/lookup/m@v1.0.0", false},
		{"registry.npmjs.org", "/is-number/-/is-number-7.0.0.tgz", true},
		{"registry.npmjs.org", "/@types%2fnode/-/node-1.0.0.tgz", true},
		{"registry.npmjs.org", "/is-number", false},
		{"files.pythonhosted.org", "/packages/aa/bb/x-1.0.tar.gz", true},
		{"pypi.org", "/simple/x/", false},
	} {
		if got := Cacheable(c.host, c.path, ""); got != c.want {
			t.Errorf("%s%s: %v", c.host, c.path, got)
		}
	}
	if Cacheable("proxy.golang.org", "/m/@v/v1.0.0.zip", "x=1") {
		t.Error("a query is cacheable")
	}
}

// TestCapHoldsUnderConcurrency: sixteen concurrent fetches of 100 KiB
// under a 1 MiB cap — ten are delivered, six refused before their first
// byte, and the store's counter says exactly what was delivered. Bodies
// of unknown length (chunked) are cut at the cap: never more than the
// cap is delivered.
func TestCapHoldsUnderConcurrency(t *testing.T) {
	s := openStore(t)
	body := bytes.Repeat([]byte("c"), 100<<10)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/chunked/") {
			for i := 0; i < 4; i++ {
				w.Write(body[:len(body)/4])
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	for _, prefix := range []string{"/known/", "/chunked/"} {
		cfg := up.config("example.com")
		cfg.MaxBytes = 1 << 20
		r := start(t, s, cfg)
		type result struct {
			code int
			n    int
			err  error
		}
		results := make(chan result, 16)
		for i := range 16 {
			go func() {
				resp, err := client(r.url).Get("http://example.com" + prefix + strconv.Itoa(i))
				if err != nil {
					results <- result{err: err}
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				results <- result{resp.StatusCode, len(b), err}
			}()
		}
		var delivered, whole int
		for range 16 {
			x := <-results
			if x.code == 200 && x.err == nil {
				whole++
			}
			if x.code == 200 {
				delivered += x.n
			}
		}
		r.p.Close()
		used, _ := s.EgressUsed(t.Context(), r.episode)
		var recorded int64
		for _, f := range r.ledger(t, s) {
			recorded += f.Bytes
		}
		if used > 1<<20 || recorded > 1<<20 || int64(delivered) > used {
			t.Fatalf("%s: used %d, recorded %d, delivered %d over a 1 MiB cap", prefix, used, recorded, delivered)
		}
		if prefix == "/known/" && (whole != 10 || used != 10*int64(len(body))+16*DefaultRequestFloor) {
			t.Fatalf("known lengths: %d whole, used %d", whole, used)
		}
		t.Logf("%s: %d whole, %d bytes delivered, %d charged", prefix, whole, delivered, used)
	}
}

// TestServesOnUnixSocket: the kernel serves the proxy on the episode's
// egress socket (a Unix socket the domain reaches through its bridge):
// plain fetches and CONNECT tunnels both work over it, and a tunnel's
// bytes are counted, charged and recorded without a path or digest.
func TestServesOnUnixSocket(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, registry([]byte("zip body")))
	cfg := up.config("example.com")
	ep := newEpisode(t, s)
	cfg.EpisodeID, cfg.Ledger, cfg.MaxBytes = ep, s, 1<<30
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "egress.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(l)
	defer p.Close()
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	proxyURL, _ := url.Parse("http://127.0.0.1:8788")
	// Plain HTTP through the socket.
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DialContext: dial}}
	if code, b, _ := get(t, c, "http://example.com/m/@v/v1.0.0.zip"); code != 200 || string(b) != "zip body" {
		t.Fatalf("plain: %d %q", code, b)
	}
	// HTTPS through a CONNECT tunnel: the proxy terminates TLS with a
	// leaf of the episode CA, which the tool trusts.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CACertPEM())
	tc := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL), DialContext: dial,
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
	if code, b, _ := get(t, tc, "https://example.com/m/@v/v1.0.0.zip"); code != 200 || string(b) != "zip body" {
		t.Fatalf("tunnel: %d %q", code, b)
	}
	tc.CloseIdleConnections()
	p.Close()
	l2, err := s.EgressFetches(t.Context(), ep)
	// The tunnel's opening row is written directly, the others queued:
	// rows are found by what they are, not where they fall.
	var fetches, opened, tun []store.EgressFetch // fetches: the plain GET and the one inside TLS
	for _, f := range l2 {
		switch {
		case f.Kind == store.EgressTunnel && f.Outcome == store.EgressOpened:
			opened = append(opened, f)
		case f.Kind == store.EgressTunnel:
			tun = append(tun, f)
		default:
			fetches = append(fetches, f)
		}
	}
	if err != nil || len(l2) != 4 || len(opened) != 1 || len(tun) != 1 || len(fetches) != 2 {
		t.Fatalf("ledger: %v %+v", err, l2)
	}
	delivered := int64(0)
	for _, f := range fetches {
		if f.Kind != store.EgressHTTP || f.Host != "example.com" || f.Path != "/m/@v/v1.0.0.zip" || f.Bytes != 8 || f.SHA256 == "" {
			t.Fatalf("fetch row: %+v", f)
		}
		delivered += f.Bytes
	}
	if t0 := tun[0]; t0.Host != "example.com" || t0.Path != "" || t0.SHA256 != "" || t0.Bytes < 8 || t0.BytesUp == 0 {
		t.Fatalf("tunnel row: %+v", t0)
	}
	used, _ := s.EgressUsed(t.Context(), ep)
	if used != delivered+3*DefaultRequestFloor {
		t.Fatalf("charged %d, delivered %d and three request floors (plain, CONNECT, inner GET)", used, delivered)
	}
}

// TestConcurrencyIsBounded: with every slot held by an open tunnel, the
// next request is refused (503, effect_broker_saturated), recorded and
// reported; once the tunnel closes, requests are served again.
func TestConcurrencyIsBounded(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, registry([]byte("zip")))
	cfg := up.config("example.com")
	cfg.MaxConcurrent = 1
	r := start(t, s, cfg)
	c, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("tunnel: %v %v", err, resp)
	}
	code, body, _ := get(t, client(r.url), "http://example.com/m/@v/list")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "effect_broker_saturated") {
		t.Fatalf("with the slot held: %d %q", code, body)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		// A connection over the cap (2 × MaxConcurrent) while the
		// tunnel's is still being released is closed at once: retry.
		if resp, err := client(r.url).Get("http://example.com/m/@v/list"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot was never freed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(r.refusals()); n < 1 {
		t.Fatal("saturation not reported")
	}
}

// TestUpstreamCertificateIsVerified: the upgrade to HTTPS is verified —
// an upstream whose certificate the roots do not vouch for is never
// read, and the tool gets a 502 saying so.
func TestUpstreamCertificateIsVerified(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, registry([]byte("zip")))
	cfg := up.config("example.com")
	cfg.RootCAs = x509.NewCertPool() // trusts nothing
	r := start(t, s, cfg)
	code, body, _ := get(t, client(r.url), "http://example.com/m/@v/v1.0.0.zip")
	if code != http.StatusBadGateway || !strings.Contains(string(body), "target_unavailable") || up.hits.Load() != 0 {
		t.Fatalf("%d %q, upstream served %d", code, body, up.hits.Load())
	}
	if l := r.ledger(t, s); len(l) != 1 || l[0].Outcome != store.EgressFailed {
		t.Fatalf("ledger: %+v", l)
	}
}

// TestCloseCutsTunnels: a tunnel's row is in the ledger before the domain
// is told it is open (a kernel that dies then leaves it); an idle tunnel
// does not keep a closing proxy (the end of an episode) waiting for its
// idle timeout; it is cut and its closing row recorded.
func TestCloseCutsTunnels(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, registry(nil))
	r := start(t, s, up.config("example.com"))
	c, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("tunnel: %v %v", err, resp)
	}
	if l, err := s.EgressFetches(t.Context(), r.episode); err != nil || len(l) != 1 || l[0].Outcome != store.EgressOpened || l[0].Host != "example.com" {
		t.Fatalf("when the 200 arrived, the ledger held %+v (%v), want the tunnel's opening row", l, err)
	}
	done := make(chan struct{})
	go func() { r.p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for an idle tunnel")
	}
	if l := r.ledger(t, s); len(l) != 2 || l[1].Kind != store.EgressTunnel || l[1].Outcome == store.EgressOpened {
		t.Fatalf("ledger: %+v", l)
	}
	// A ledger that cannot take the opening row: no tunnel opens.
	cfg := up.config("example.com")
	cfg.Ledger = refusingLedger{s}
	r2 := start(t, s, cfg)
	req, _ := http.NewRequest(http.MethodConnect, r2.url, nil)
	req.Host, req.URL.Opaque = "example.com:443", "example.com:443"
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("CONNECT with the ledger refusing rows: %d, want 503", resp.StatusCode)
	}
}

// refusingLedger is the store with row writes failing, as a database
// that has gone away answers them.
type refusingLedger struct{ *store.Postgres }

func (refusingLedger) RecordEgress(context.Context, ...store.EgressFetch) error {
	return errors.New("connection refused")
}

// slowLedger commits each batch of rows late, as a loaded database does.
type slowLedger struct {
	*store.Postgres
	batches atomic.Int64
}

func (l *slowLedger) RecordEgress(ctx context.Context, fs ...store.EgressFetch) error {
	time.Sleep(300 * time.Millisecond)
	l.batches.Add(1)
	return l.Postgres.RecordEgress(ctx, fs...)
}

// TestCloseWaitsForEveryRow: rows are written behind the responses, in
// batches, but Close returns only once every one is in the ledger — the
// ledger is whole before the episode settles — and fetches arriving while
// a batch commits share the next commit.
func TestCloseWaitsForEveryRow(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, registry([]byte("zip")))
	cfg := up.config("example.com")
	slow := &slowLedger{Postgres: s}
	cfg.Ledger = slow
	r := start(t, s, cfg)
	c := client(r.url)
	const n = 12
	for range n {
		if code, _, _ := get(t, c, "http://example.com/m/@v/list"); code != 200 {
			t.Fatalf("fetch: %d", code)
		}
	}
	if err := r.p.Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := s.EgressFetches(context.Background(), r.episode)
	if err != nil || len(rows) != n {
		t.Fatalf("after Close the ledger has %d rows (%v), want %d", len(rows), err, n)
	}
	if b := slow.batches.Load(); b >= n {
		t.Errorf("%d commits for %d rows: not batched", b, n)
	}
}
