package egress

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"testing"
)

// BenchmarkTunnelCachedFetch: a cached 1 MiB module zip fetched over HTTPS
// through the terminating proxy (keep-alive, one handshake) against the
// same bytes read directly from a plain TLS server on loopback; and the
// first-handshake cost (leaf mint + handshake through a new proxy).
func BenchmarkTunnelCachedFetch(b *testing.B) {
	body := modZip(b, "golang.org/x/m", "v1.0.0", 1<<20)
	up := newUpstream(b, registry(body))
	const zip = "https://example.com/golang.org/x/m/@v/v1.0.0.zip"
	read := func(b *testing.B, c *http.Client, u string) {
		resp, err := c.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n != int64(len(body)) {
			b.Fatalf("%d, %d bytes", resp.StatusCode, n)
		}
	}
	b.Run("direct", func(b *testing.B) {
		roots := x509.NewCertPool()
		roots.AddCert(up.srv.Certificate())
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		b.SetBytes(int64(len(body)))
		for i := 0; i < b.N; i++ {
			read(b, c, up.srv.URL+"/golang.org/x/m/@v/v1.0.0.zip")
		}
	})
	s := openStore(b)
	cache, err := OpenCache(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	cfg := up.config("example.com")
	cfg.Cache = cache
	b.Run("tunnel", func(b *testing.B) {
		r := start(b, s, cfg)
		c := tunnelClient(r)
		read(b, c, zip) // fill the cache
		b.SetBytes(int64(len(body)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			read(b, c, zip)
		}
	})
	b.Run("first-handshake", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			r := start(b, s, cfg)
			c := tunnelClient(r)
			b.StartTimer()
			resp, err := c.Head(zip)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			b.StopTimer()
			r.p.Close()
			b.StartTimer()
		}
	})
}
