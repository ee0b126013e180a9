package egress

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/storetest"
	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/dirhash"
)

// harness is the package's one throwaway PostgreSQL cluster.
var harness *storetest.Shared

func TestMain(m *testing.M) {
	harness = storetest.StartShared("autonomic-egress-")
	os.Exit(harness.Run(m))
}

// openStore gives a test a fresh migrated database.
func openStore(t testing.TB) *store.Postgres {
	t.Helper()
	db := harness.Database(t, "eg")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, store.Config{
		URL: harness.Cluster.KernelConnString(db), AdminURL: harness.Cluster.AdminConnString(db),
		InstanceID: "kernel-egress", MaxConns: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func newEpisode(t testing.TB, s *store.Postgres) uuid.UUID {
	t.Helper()
	ep, err := s.CreateEpisode(context.Background(), store.NewEpisode{Spec: []byte(`{"intent":"egress test"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	return ep.ID
}

// running is a proxy served on a loopback TCP listener (a tool's
// HTTP_PROXY) for one episode.
type running struct {
	p       *Proxy
	url     string
	episode uuid.UUID
	mu      sync.Mutex
	refused []Refusal
}

func (r *running) refusals() []Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Refusal(nil), r.refused...)
}

// start serves a proxy for a new episode of s with cfg (EpisodeID, Ledger
// and OnRefused filled in; MaxBytes defaulted).
func start(t testing.TB, s *store.Postgres, cfg Config) *running {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, s, cfg, l)
	r.url = "http://" + l.Addr().String()
	return r
}

// serve serves a proxy for a new episode of s with cfg on l (a loopback
// TCP listener, or an episode's egress socket).
func serve(t testing.TB, s *store.Postgres, cfg Config, l net.Listener) *running {
	t.Helper()
	r := &running{episode: newEpisode(t, s)}
	cfg.EpisodeID = r.episode
	if cfg.Ledger == nil {
		cfg.Ledger = s
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 1 << 30
	}
	cfg.OnRefused = func(x Refusal) { r.mu.Lock(); r.refused = append(r.refused, x); r.mu.Unlock() }
	p, err := New(cfg)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	go p.Serve(l)
	t.Cleanup(func() { p.Close() })
	r.p = p
	return r
}

// ledger is the episode's fetch ledger once every fetch in flight is
// recorded.
func (r *running) ledger(t testing.TB, s *store.Postgres) []store.EgressFetch {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.p.wg.Wait()
		r.p.queued.Wait()
		out, err := s.EgressFetches(context.Background(), r.episode)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// upstream is an HTTPS registry on loopback that counts the requests it
// serves; the proxy reaches it as example.com (the name its test
// certificate carries) through the resolver and port overrides.
type upstream struct {
	srv   *httptest.Server
	hits  atomic.Int64
	mu    sync.Mutex
	paths map[string]int
}

func newUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{paths: map[string]int{}}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		u.paths[r.URL.Path]++
		u.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) count(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.paths[path]
}

// config points a proxy at u for every allowed name.
func (u *upstream) config(allow ...string) Config {
	roots := x509.NewCertPool()
	roots.AddCert(u.srv.Certificate())
	port, _ := strconv.Atoi(u.srv.URL[len("https://127.0.0.1:"):])
	return Config{
		Allow: allow,
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		AllowedNets:  []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		RootCAs:      roots,
		UpstreamPort: port,
	}
}

// client sends requests through the proxy at proxyURL.
func client(proxyURL string) *http.Client {
	pu, _ := url.Parse(proxyURL)
	return &http.Client{
		Transport:     &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}
}

// modZip is a real module zip for mod@ver: one file of n bytes whose
// content depends on mod and ver (each object its own bytes, the cache
// being content-addressed). Its h1 is what the checksum database gives.
func modZip(t testing.TB, mod, ver string, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	f, err := zw.CreateHeader(&zip.FileHeader{Name: mod + "@" + ver + "/data.txt", Method: zip.Store})
	if err != nil {
		t.Fatal(err)
	}
	seed := []byte(mod + "@" + ver + " ")
	for i := 0; i < n; i += len(seed) {
		f.Write(seed[:min(len(seed), n-i)])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// goModBody is the go.mod every test module serves.
const goModBody = "module m\n"

// lookup answers a checksum-database lookup for the module version the
// path names with the h1 hashes of zipBody and goModBody, as the
// database would for those bytes.
func lookup(w http.ResponseWriter, r *http.Request, zipBody []byte) {
	mv := strings.TrimPrefix(r.URL.Path, "/sumdb/sum.golang.org/lookup/")
	mod, ver, _ := strings.Cut(mv, "@")
	tmp, err := os.CreateTemp("", "lookup-*.zip")
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	defer os.Remove(tmp.Name())
	tmp.Write(zipBody)
	tmp.Close()
	line := "1\n"
	if h, err := dirhash.HashZip(tmp.Name(), dirhash.Hash1); err == nil {
		line += mod + " " + ver + " " + h + "\n"
	}
	hm, _ := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(goModBody)), nil
	})
	io.WriteString(w, line+mod+" "+ver+"/go.mod "+hm+"\n\n")
}
