package broker

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// httpAdapters are the read and mutation adapters for a loopback server.
func httpAdapters(base string, pl *Payloads) []Adapter {
	read := HTTPTarget{BaseURL: base, Methods: []string{"GET", "HEAD"}, Paths: []string{"docs/**", "redirect", "big", "drip", "huge-header"},
		AllowedNets: loopback, MaxResponseBytes: 4096, Timeout: 2 * time.Second}
	mut := HTTPTarget{BaseURL: base, Methods: []string{"POST", "PUT"}, Paths: []string{"items"}, AllowedNets: loopback,
		Timeout: 5 * time.Second, ReconcilePath: "/idempotency", Credential: &Credential{Header: "Authorization", Prefix: "Bearer ", Env: "AUTONOMIC_TEST_TOKEN"}}
	return []Adapter{
		&HTTP{Targets: map[string]HTTPTarget{"docs": read}, Payloads: pl},
		&HTTP{Mutation: true, Targets: map[string]HTTPTarget{"api": mut}, Payloads: pl},
	}
}

// mutationServer applies POST /items once per Idempotency-Key and answers
// GET /idempotency from its record.
type mutationServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]int
	auth []string
}

func newMutationServer(t testing.TB) *mutationServer {
	t.Setenv("AUTONOMIC_TEST_TOKEN", "s3cret")
	m := &mutationServer{seen: map[string]int{}}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		m.mu.Lock()
		defer m.mu.Unlock()
		switch {
		case r.Method == "POST" && r.URL.Path == "/items":
			m.seen[key]++
			m.auth = append(m.auth, r.Header.Get("Authorization"))
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"created":%q}`, key)
		case r.Method == "GET" && r.URL.Path == "/idempotency":
			if m.seen[key] > 0 {
				w.WriteHeader(200)
				return
			}
			w.WriteHeader(404)
		default:
			w.WriteHeader(400)
		}
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *mutationServer) count(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[key]
}

func hostileServer(t testing.TB) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/docs/api.json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, strings.Repeat(`{"ok":true}`, 100))
		case "/redirect":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/big":
			io.WriteString(w, strings.Repeat("x", 5000))
		case "/drip":
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			for i := 0; i < 100; i++ {
				if _, err := w.Write([]byte("x")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestHostileHTTPTargets: a redirect to a disallowed host, an oversized
// body, a slow drip, a name resolving to a disallowed address — each
// refused with its catalogued error, and nothing fetched for the worker.
func TestHostileHTTPTargets(t *testing.T) {
	srv := hostileServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := strings.Cut(host, ":")
	dns := map[string][]netip.Addr{
		"docs.test":   {netip.MustParseAddr("127.0.0.1")},
		"evil.test":   {netip.MustParseAddr("10.1.2.3")},
		"sneaky.test": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254")},
	}
	resolve := func(_ context.Context, h string) ([]netip.Addr, error) {
		if a, ok := dns[h]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("no such host")
	}
	e := newEnv(t, func(e *env, cfg *Config) {
		targets := map[string]HTTPTarget{}
		for id, base := range map[string]string{"docs": "http://docs.test:" + port, "evil": "http://evil.test:" + port,
			"sneaky": "http://sneaky.test:" + port, "public-only": srv.URL} {
			tg := HTTPTarget{BaseURL: base, Methods: []string{"GET"}, Paths: []string{"docs/**", "redirect", "big", "drip"},
				AllowedNets: loopback, MaxResponseBytes: 4096, Timeout: 2 * time.Second, RatePerMinute: 1000}
			if id == "public-only" {
				tg.AllowedNets = nil
			}
			targets[id] = tg
		}
		cfg.Adapters = append(cfg.Adapters, &HTTP{Targets: targets, Payloads: e.payloads, Resolve: resolve})
	})
	read := func(target, p string) *protocol.WorkerResponse {
		r := e.do(prepareReq(e, "http_read", target, map[string]string{"method": "GET", "path": p}, nil))
		if !r.OK {
			return r
		}
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, r.Result)))
		return e.do(byEffectReq(e, protocol.WorkerCommit, r.Result))
	}

	t.Run("allowed read and bounded fetch", func(t *testing.T) {
		c := mustOK(t, read("docs", "/docs/api.json"))
		want := strings.Repeat(`{"ok":true}`, 100)
		var got []byte
		for off := int64(0); ; {
			req := byEffectReq(e, protocol.WorkerFetchResponse, c)
			req.Offset, req.Limit = off, 300
			ch := mustOK(t, e.do(req)).Chunk
			if ch.TotalSize != int64(len(want)) || ch.Length > 300 || ch.Digest != Digest([]byte(want)) {
				t.Fatalf("chunk %+v", ch)
			}
			b, _ := base64.StdEncoding.DecodeString(ch.DataB64)
			got = append(got, b...)
			off += int64(ch.Length)
			if ch.EOF {
				break
			}
		}
		if string(got) != want {
			t.Fatal("fetched body differs")
		}
	})
	for _, tc := range []struct {
		name, target, path string
		want               protocol.Code
	}{
		{"redirect to a disallowed host", "docs", "/redirect", protocol.CodeRedirectRefused},
		{"oversized body", "docs", "/big", protocol.CodeResponseTooLarge},
		{"slow drip", "docs", "/drip", protocol.CodeTargetTimeout},
		{"name resolves to a private address", "evil", "/docs/a", protocol.CodeAddressRefused},
		{"name resolves to one good and one metadata address", "sneaky", "/docs/a", protocol.CodeAddressRefused},
		{"loopback literal on a public-only target", "public-only", "/docs/a", protocol.CodeAddressRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := read(tc.target, tc.path)
			wantErr(t, r, tc.want)
			if time.Since(start) > 5*time.Second {
				t.Fatal("refusal was not bounded by the target's timeout")
			}
		})
	}
	t.Run("path and method outside the allowlist", func(t *testing.T) {
		wantErr(t, e.do(prepareReq(e, "http_read", "docs", map[string]string{"method": "GET", "path": "/admin"}, nil)), protocol.CodeForbidden)
		wantErr(t, e.do(prepareReq(e, "http_read", "docs", map[string]string{"method": "DELETE", "path": "/docs/a"}, nil)), protocol.CodeForbidden)
		wantErr(t, e.do(prepareReq(e, "http_read", "docs", map[string]string{"method": "GET", "path": "/docs/../admin"}, nil)), protocol.CodeInvalidField)
		wantErr(t, e.do(prepareReq(e, "http_read", "docs", map[string]string{"method": "GET", "path": "/docs/a", "url": "http://x"}, nil)), protocol.CodeUnknownField)
	})
}

// TestHTTPMutation: credentials by reference, the effect id as
// Idempotency-Key, and a rate limit that leaves the effect ready.
func TestHTTPMutation(t *testing.T) {
	srv := newMutationServer(t)
	e := newEnv(t, func(e *env, cfg *Config) {
		as := httpAdapters(srv.URL, e.payloads)
		mut := as[1].(*HTTP)
		tg := mut.Targets["api"]
		tg.RatePerMinute = 1
		mut.Targets["api"] = tg
		cfg.Adapters = append(cfg.Adapters, as...)
	})
	post := func() *protocol.EffectResult {
		p := mustOK(t, e.do(prepareReq(e, "http_mutation", "api", map[string]string{"method": "POST", "path": "/items", "content_type": "application/json"}, []byte(`{}`))))
		if p.Class != "class_3_authoritative_external_mutation" {
			t.Fatal(p.Class)
		}
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		return p
	}
	p := post()
	c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)))
	if c.State != "committed" || srv.count(p.ID) != 1 || srv.auth[0] != "Bearer s3cret" {
		t.Fatalf("%s %d %v", c.State, srv.count(p.ID), srv.auth)
	}
	if strings.Contains(string(c.Receipt), "s3cret") {
		t.Fatal("credential in the receipt")
	}
	p2 := post()
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p2)), protocol.CodeRateLimited)
	if s := mustOK(t, e.do(byEffectReq(e, protocol.WorkerStatus, p2))); s.State != "ready" || srv.count(p2.ID) != 0 {
		t.Fatalf("rate-limited effect %s, sent %d", s.State, srv.count(p2.ID))
	}
}

// TestHTTPTLSVerified: TLS is verified against the target's CA and the
// configured name, on the pinned address.
func TestHTTPTLSVerified(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secure") }))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	_ = os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "https://"), ":")
	resolve := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	e := newEnv(t, func(e *env, cfg *Config) {
		tg := HTTPTarget{BaseURL: "https://example.com:" + port, Methods: []string{"GET"}, Paths: []string{"**"}, AllowedNets: loopback, CAFile: ca}
		untrusted := tg
		untrusted.CAFile = ""
		cfg.Adapters = append(cfg.Adapters, &HTTP{Targets: map[string]HTTPTarget{"tls": tg, "untrusted": untrusted}, Payloads: e.payloads, Resolve: resolve})
	})
	for target, want := range map[string]protocol.Code{"tls": "", "untrusted": protocol.CodeTargetUnavailable} {
		p := mustOK(t, e.do(prepareReq(e, "http_read", target, map[string]string{"method": "GET", "path": "/x"}, nil)))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		r := e.do(byEffectReq(e, protocol.WorkerCommit, p))
		if want == "" {
			mustOK(t, r)
			continue
		}
		wantErr(t, r, want)
	}
}
