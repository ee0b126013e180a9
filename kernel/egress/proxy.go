package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	gohash "hash"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/connlimit"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/lockfile"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
)

// Ledger is what the proxy needs of the authority store (store.Postgres
// implements it): the per-episode byte counter and the fetch ledger.
type Ledger interface {
	ReserveEgress(ctx context.Context, episodeID uuid.UUID, n, limit int64) (int64, error)
	ReleaseEgress(ctx context.Context, episodeID uuid.UUID, n int64) error
	// RecordEgress appends rows in one transaction (the proxy batches
	// the rows that queued while the previous batch was written).
	RecordEgress(ctx context.Context, fs ...store.EgressFetch) error
}

// Refusal is a refused attempt, reported to Config.OnRefused (the
// homeostat's fast loop: a worker hammering refused hosts is a trajectory).
type Refusal struct {
	EpisodeID uuid.UUID
	Method    string
	Host      string
	Code      protocol.Code
	Reason    string
}

// Config is one episode's proxy.
type Config struct {
	EpisodeID uuid.UUID
	// Allow are the hosts the episode may reach (Allowlist computes them
	// from the policy and the operator's ceiling). Empty: nothing.
	Allow    []string
	MaxBytes int64 // per episode, over all fetches (required, > 0)
	// MaxResponseBytes caps one plain-HTTP body (default 512 MiB).
	MaxResponseBytes int64
	// Timeout bounds one plain-HTTP fetch and a tunnel's idle time
	// (default 5 min).
	Timeout time.Duration
	// MaxConcurrent bounds the requests and tunnels in flight (default
	// 64); beyond it a request is refused as effect_broker_saturated. A
	// tunnel's slot covers the requests inside it, one at a time.
	MaxConcurrent int
	Ledger        Ledger
	Cache         *Cache // nil: no cache
	OnRefused     func(Refusal)

	// Upstream overrides, for tests with an upstream on loopback: the
	// resolver, the networks its addresses may be in (empty: public
	// unicast only), the TLS roots (nil: the system's) and the port
	// connected to in place of 443.
	Resolve      func(ctx context.Context, host string) ([]netip.Addr, error)
	AllowedNets  []netip.Prefix
	RootCAs      *x509.CertPool
	UpstreamPort int
	// Registries maps hosts to the registry protocol they are held to
	// (nil: DefaultRegistries); GoCodeHosts are the first elements a Go
	// module path may have on a GoProxy host (nil: DefaultGoCodeHosts).
	Registries  map[string]Registry
	GoCodeHosts []string
	// MaxUpBytes caps what a domain sends upstream over the proxy's life
	// (default DefaultMaxUpBytes): the path, query and header values of
	// every request fetched, the only bytes of a domain's that leave (no
	// bodies; tunnels are terminated). A registry read sends a few hundred
	// bytes; data leaving in paths runs out here.
	MaxUpBytes int64
	// RequestFloor is charged against MaxBytes for every admitted request
	// before anything is fetched, HEAD and a cache hit included (default
	// DefaultRequestFloor), so requests that move no body still spend the
	// cap; MaxRequests bounds them outright (default DefaultMaxRequests).
	RequestFloor int64
	MaxRequests  int64
	// CA terminates tunnels (nil: New mints one); the episode passes its
	// own so that every domain it starts trusts one certificate.
	CA *CA
	// Lock, when set (the policy's egress.lockfile "bound"), is what the
	// base commit's lockfiles pin: a registry host then serves only
	// those objects (lockrule.go), and fills are checked against its
	// digests first (digest.go).
	Lock *lockfile.Set
}

// Defaults of the per-proxy bounds.
const (
	DefaultMaxUpBytes   = config.DefaultEgressMaxUpBytes
	DefaultRequestFloor = config.DefaultEgressRequestFloor
	DefaultMaxRequests  = config.DefaultEgressMaxRequests
	// maxRefusalRows bounds the refusal rows one proxy writes; later
	// refusals are still answered and signalled, not recorded.
	maxRefusalRows = 256
)

// Proxy is one episode's egress proxy.
type Proxy struct {
	cfg    Config
	ca     *CA // terminates tunnels; its key never leaves memory
	allow  map[string]bool
	srv    *http.Server
	wg     sync.WaitGroup
	bank   *bank
	slots  chan struct{}
	rows   chan store.EgressFetch // ledger rows queued for the writer (record)
	wrote  chan struct{}          // closed when the writer has written every row
	queued sync.WaitGroup         // rows queued and not yet written

	mu         sync.Mutex
	closed     bool
	rowsMu     sync.RWMutex // held to queue a row (read) and to close the queue (write)
	rowsClosed bool
	tunnels    map[net.Conn]bool // hijacked: http.Server.Close does not see them
	goSeen     goSeen
	npm        npmSeen
	codeHosts  map[string]bool
	// up counts the bytes sent upstream (outbound), requests the requests
	// admitted, refusals the refusal rows recorded.
	up, requests, refusals atomic.Int64
}

// Allowlist is an episode's effective allow list: the policy's egress
// grant intersected with the operator's ceiling. A policy without an
// egress block grants nothing.
func Allowlist(p *policy.Policy, ceiling []string) []string {
	if p == nil || p.Egress == nil {
		return nil
	}
	top := map[string]bool{}
	for _, h := range ceiling {
		top[h] = true
	}
	var out []string
	for _, h := range p.Egress.Allow {
		if top[h] {
			out = append(out, h)
		}
	}
	return out
}

// New makes a proxy; Serve runs it.
func New(cfg Config) (*Proxy, error) {
	if cfg.Ledger == nil || cfg.EpisodeID == uuid.Nil || cfg.MaxBytes <= 0 {
		return nil, errors.New("egress: a ledger, an episode and a byte cap are required")
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = 512 << 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 64
	}
	if cfg.Registries == nil {
		cfg.Registries = DefaultRegistries()
	}
	if cfg.GoCodeHosts == nil {
		cfg.GoCodeHosts = DefaultGoCodeHosts()
	}
	if cfg.MaxUpBytes <= 0 {
		cfg.MaxUpBytes = DefaultMaxUpBytes
	}
	if cfg.RequestFloor <= 0 {
		cfg.RequestFloor = DefaultRequestFloor
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	ca := cfg.CA
	if ca == nil {
		var err error
		if ca, err = NewCA(); err != nil {
			return nil, fmt.Errorf("egress: episode CA: %w", err)
		}
	}
	p := &Proxy{cfg: cfg, ca: ca, allow: map[string]bool{}, slots: make(chan struct{}, cfg.MaxConcurrent),
		rows: make(chan store.EgressFetch, maxPendingRows), wrote: make(chan struct{})}
	p.codeHosts = map[string]bool{}
	for _, h := range cfg.GoCodeHosts {
		p.codeHosts[h] = true
	}
	go p.writeRows()
	p.bank = &bank{ledger: cfg.Ledger, p: p}
	for _, h := range cfg.Allow {
		if !policy.ValidHost(h) {
			return nil, fmt.Errorf("egress: %q is not a host name", h)
		}
		p.allow[h] = true
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       2 * time.Minute,
	}
	return p, nil
}

// Serve serves the domain's connections on l (the episode's egress
// socket) until Close.
func (p *Proxy) Serve(l net.Listener) error {
	err := p.srv.Serve(connlimit.Listen(l, p.maxConns()))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// maxConns is how many connections the proxy keeps open: its requests
// and tunnels in flight, and as many again waiting or idle (a tool keeps
// its proxy connection alive).
func (p *Proxy) maxConns() int { return 2 * p.cfg.MaxConcurrent }

// Close stops serving, cuts open tunnels, waits until every fetch in
// flight has been recorded, and gives back the unused byte reservation.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	// Every handler has returned, so no row is queued after this; the
	// writer drains the queue and stops.
	p.rowsMu.Lock()
	if !p.rowsClosed {
		p.rowsClosed = true
		close(p.rows)
	}
	p.rowsMu.Unlock()
	<-p.wrote
	p.bank.close()
	return err
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.wg.Add(1)
	defer p.wg.Done()
	start := time.Now()
	q, ref := admit(r, p.allow)
	if kind, ok := p.cfg.Registries[q.host]; ref == nil && ok {
		// A tunnel is terminated here, so its inner requests come back
		// through ServeHTTP and meet the registry's rules like plain ones.
		if !q.tunnel {
			ref = p.registryRule(kind, &q)
		}
	}
	if ref == nil && p.requests.Add(1) > p.cfg.MaxRequests {
		ref = refuse(protocol.CodeLimitExceeded, "the episode's egress request budget is spent: no further requests")
	}
	if ref == nil {
		// The floor every request pays, whatever it moves.
		if err := p.bank.take(r.Context(), p.cfg.RequestFloor); err != nil {
			ref = capRefusal(err)
		}
	}
	if inner, _ := r.Context().Value(inTunnel{}).(bool); ref == nil && !inner {
		select {
		case p.slots <- struct{}{}:
			defer func() { <-p.slots }()
		default:
			ref = &refusal{code: protocol.CodeEffectBrokerSaturated, status: http.StatusServiceUnavailable,
				reason: "too many fetches in flight for this episode; retry"}
		}
	}
	if ref != nil {
		kind := store.EgressHTTP
		if r.Method == http.MethodConnect {
			kind = store.EgressTunnel
		}
		host := r.Host
		path := ""
		if r.URL != nil {
			if r.URL.Host != "" {
				host = r.URL.Host
			}
			path = r.URL.EscapedPath()
		}
		if h, port, err := net.SplitHostPort(host); err == nil && port == "443" && kind == store.EgressTunnel {
			host = h // the row names the host, as an admitted tunnel's does
		}
		p.refuse(w, r.Context(), store.EgressFetch{Kind: kind, Method: r.Method, Host: host, Path: path}, ref, start)
		return
	}
	if q.tunnel {
		p.tunnel(w, r, q, start)
		return
	}
	p.fetch(w, r, q, start)
}

// refuse answers 403 (or ref.status) with a body the tool prints, records
// the attempt and reports it.
func (p *Proxy) refuse(w http.ResponseWriter, ctx context.Context, f store.EgressFetch, ref *refusal, start time.Time) {
	f.Outcome, f.Code, f.Reason, f.Status = store.EgressRefused, string(ref.code), ref.reason, ref.status
	if w != nil {
		writeError(w, ref)
	}
	// A worker hammering refused requests cannot fill the shared ledger:
	// the first maxRefusalRows are rows, the last says so.
	switch n := p.refusals.Add(1); {
	case n < maxRefusalRows:
		p.record(ctx, f, start)
	case n == maxRefusalRows:
		f.Reason += " (the last refusal recorded for this episode's proxy; later ones are answered and signalled only)"
		p.record(ctx, f, start)
	}
	if p.cfg.OnRefused != nil {
		p.cfg.OnRefused(Refusal{EpisodeID: p.cfg.EpisodeID, Method: f.Method, Host: f.Host, Code: ref.code, Reason: ref.reason})
	}
}

// fail answers a fetch that was admitted but could not be completed.
func (p *Proxy) fail(w http.ResponseWriter, ctx context.Context, f store.EgressFetch, ref *refusal, start time.Time) {
	f.Outcome, f.Code, f.Reason, f.Status = store.EgressFailed, string(ref.code), ref.reason, ref.status
	if w != nil {
		writeError(w, ref)
	}
	p.record(ctx, f, start)
}

func writeError(w http.ResponseWriter, ref *refusal) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Autonomic-Egress", string(ref.code))
	h.Set("Connection", "close")
	w.WriteHeader(ref.status)
	fmt.Fprintf(w, "autonomic egress proxy: %s (%s)\n", ref.reason, ref.code)
}

func (p *Proxy) record(ctx context.Context, f store.EgressFetch, start time.Time) {
	f.EpisodeID = p.cfg.EpisodeID
	f.Duration = time.Since(start)
	// The ledger outlives the request: a tool that hung up was still
	// served (or refused). The row is queued and written behind the
	// response by one writer, in batches (one commit for every row that
	// queued while the last batch was written), so a tool's next request
	// on a kept-alive connection does not wait for the database; at most
	// maxPendingRows wait at once (then the handler waits: back-pressure,
	// never a refusal), and Close returns only once every row is written.
	p.rowsMu.RLock()
	defer p.rowsMu.RUnlock()
	if p.rowsClosed {
		// A handler outliving Close (it cannot, by the WaitGroup; kept
		// so a row is never lost): written here and now.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = p.cfg.Ledger.RecordEgress(ctx, f)
		return
	}
	p.queued.Add(1)
	p.rows <- f
}

// writeRows is the ledger writer: it takes every queued row, writes them
// in one RecordEgress, and stops when Close has closed the queue and it is
// empty.
func (p *Proxy) writeRows() {
	defer close(p.wrote)
	batch := make([]store.EgressFetch, 0, maxPendingRows)
	for f := range p.rows {
		batch = append(batch[:0], f)
	drain:
		for len(batch) < maxPendingRows {
			select {
			case g, ok := <-p.rows:
				if !ok {
					break drain
				}
				batch = append(batch, g)
			default:
				break drain
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = p.cfg.Ledger.RecordEgress(ctx, batch...)
		cancel()
		for range batch {
			p.queued.Done()
		}
	}
}

// maxPendingRows bounds the ledger rows being written behind the fetches.
const maxPendingRows = 64

// errUpCap: the proxy's outbound byte cap is reached.
var errUpCap = errors.New("egress: outbound byte cap reached")

func capRefusal(err error) *refusal {
	if errors.Is(err, errUpCap) {
		return refuse(protocol.CodeLimitExceeded, "the episode's outbound byte cap is reached: no further requests leave")
	}
	if errors.Is(err, store.ErrEgressCap) {
		return refuse(protocol.CodeLimitExceeded, "the episode's egress byte cap is reached: no further fetches")
	}
	return &refusal{code: protocol.CodeAuthorityUnavailable, status: http.StatusServiceUnavailable, reason: "the egress ledger is unavailable"}
}

// dial connects to host's pinned address (broker.PinAddress: one lookup,
// every address checked) on port 443 or the test override.
func (p *Proxy) dial(ctx context.Context, host string) (net.Conn, error) {
	addr, err := broker.PinAddress(ctx, p.cfg.Resolve, host, p.cfg.AllowedNets)
	if err != nil {
		return nil, err
	}
	port := 443
	if p.cfg.UpstreamPort != 0 {
		port = p.cfg.UpstreamPort
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeTargetUnavailable, "%w", err)
	}
	return c, nil
}

// forwarded are the request headers a fetch carries upstream; nothing
// else (no Authorization, Cookie or Proxy-* header) leaves the domain.
var forwarded = []string{"Accept", "User-Agent", "If-None-Match", "If-Modified-Since"}

// maxForwarded bounds one forwarded header's value: a longer one is
// dropped, not truncated, so a tool never sends a mangled value and a
// worker cannot ship kilobytes per request in a User-Agent.
const maxForwarded = 256

// cacheableAccept and cacheableAgent are what a fetch that may fill the
// shared cache sends in place of the tool's: the object filed must not
// be the variant one episode's headers chose for every other.
const (
	cacheableAccept = "*/*"
	cacheableAgent  = "autonomic-egress"
)

// upHeaders sets on up the headers a fetch carries: the forwarded ones,
// bounded, or for a cacheable object fixed ones and no conditionals.
func upHeaders(up, from http.Header, cacheable bool) {
	if cacheable {
		up.Set("Accept", cacheableAccept)
		up.Set("User-Agent", cacheableAgent)
	} else {
		for _, h := range forwarded {
			if v := from.Get(h); v != "" && len(v) <= maxForwarded {
				up.Set(h, v)
			}
		}
	}
	up.Set("Accept-Encoding", "identity")
}

// outbound is what a request sends upstream that the domain chose: its
// method, path, query and header values, charged to MaxUpBytes.
func outbound(r *http.Request) int64 {
	n := len(r.Method) + len(r.URL.EscapedPath()) + len(r.URL.RawQuery)
	for _, vs := range r.Header {
		for _, v := range vs {
			n += len(v)
		}
	}
	return int64(n)
}

// returned are the response headers the domain sees.
var returned = []string{"Content-Type", "Etag", "Last-Modified", "Cache-Control"}

// fetch serves an admitted GET or HEAD: from the cache when the object is
// immutable and cached, otherwise from https://host/path with the
// certificate verified, streaming the body to the domain while hashing
// it, charging it to the cap and, when cacheable, filing it.
func (p *Proxy) fetch(w http.ResponseWriter, r *http.Request, q request, start time.Time) {
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.Timeout)
	defer cancel()
	f := store.EgressFetch{Kind: store.EgressHTTP, Method: q.method, Host: q.host, Path: q.path}
	key := q.host + q.path
	cacheable := p.cfg.Cache != nil && q.method == http.MethodGet && Cacheable(q.host, q.path, q.query)
	if cacheable {
		if e, blob, ok := p.cfg.Cache.lookup(key); ok {
			defer blob.Close()
			if p.cfg.Cache.stale(e) && p.takenDown(ctx, q, e) {
				// The registry no longer serves it: neither does the cache.
				p.cfg.Cache.evict(key, e.SHA256)
				f.Outcome, f.Status, f.Reason = store.EgressFetched, http.StatusNotFound, "taken down by the registry since it was cached"
				http.Error(w, "autonomic egress proxy: the registry no longer serves this object", http.StatusNotFound)
				p.record(ctx, f, start)
				return
			}
			if err := p.bank.take(ctx, e.Size); err != nil {
				p.refuse(w, ctx, f, capRefusal(err), start)
				return
			}
			w.Header().Set("Content-Type", e.ContentType)
			w.Header().Set("Content-Length", strconv.FormatInt(e.Size, 10))
			w.WriteHeader(http.StatusOK)
			n, err := p.cfg.Cache.serve(w, blob, e)
			f.Outcome, f.Status, f.Bytes = store.EgressCached, http.StatusOK, n
			if err != nil {
				f.Outcome, f.Code, f.Reason = store.EgressFailed, string(protocol.CodeInternal), "cache read: "+err.Error()
				if errors.Is(err, errCorrupt) {
					p.cfg.Cache.evict(key, e.SHA256)
				}
				p.bank.give(e.Size - n)
				p.record(ctx, f, start)
				// Cut the connection: the length promised was not met, so
				// the tool sees a failure, never a short or wrong body.
				panic(http.ErrAbortHandler)
			}
			f.SHA256 = e.SHA256
			if q.goModule != "" {
				p.goSeen.add(q.goModule)
			}
			p.record(ctx, f, start)
			return
		}
	}

	u := url.URL{Scheme: "https", Host: q.host, RawPath: q.path, RawQuery: q.query}
	u.Path, _ = url.PathUnescape(q.path)
	up, err := http.NewRequestWithContext(ctx, q.method, u.String(), nil)
	if err != nil {
		p.fail(w, ctx, f, &refusal{code: protocol.CodeInvalidField, status: http.StatusBadRequest, reason: "request: " + err.Error()}, start)
		return
	}
	upHeaders(up.Header, r.Header, cacheable)
	f.BytesUp = outbound(up)
	if p.up.Add(f.BytesUp) > p.cfg.MaxUpBytes {
		p.refuse(w, ctx, f, capRefusal(errUpCap), start)
		return
	}
	resp, err := p.client(q.host).Do(up)
	if err != nil {
		code := protocol.CodeTargetUnavailable
		var pe *protocol.Error
		if errors.As(err, &pe) {
			code = pe.Code
		} else if ctx.Err() != nil {
			code = protocol.CodeTargetTimeout
		}
		p.fail(w, ctx, f, &refusal{code: code, status: http.StatusBadGateway, reason: "upstream " + q.host + ": " + protocol.E(code).Message}, start)
		return
	}
	defer resp.Body.Close()
	f.Status = resp.StatusCode
	if q.goModule != "" && resp.StatusCode == http.StatusOK {
		p.goSeen.add(q.goModule)
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.StatusCode != http.StatusNotModified {
		loc, err := resp.Location()
		if err != nil || (loc.Scheme != "https" && loc.Scheme != "http") || loc.User != nil || !allowed(loc.Hostname(), p.allow) {
			target := ""
			if err == nil {
				target = " to " + printable(loc.Hostname())
			}
			p.refuse(w, ctx, f, refuse(protocol.CodeRedirectRefused, "upstream redirected"+target+", which is not on the policy's egress allowlist"), start)
			return
		}
		// Passed on, not followed: the tool's next request is admitted on
		// its own, so a redirect can reach only allowlisted hosts.
		w.Header().Set("Location", loc.String())
	}
	if resp.ContentLength > p.cfg.MaxResponseBytes {
		p.fail(w, ctx, f, refuse(protocol.CodeResponseTooLarge, "the upstream response exceeds egress.max_response_bytes"), start)
		return
	}
	// A known length is charged whole before the first byte, so a body
	// that does not fit is refused, not cut; what does not arrive is
	// given back.
	prepaid := int64(0)
	if resp.ContentLength > 0 && q.method == http.MethodGet {
		prepaid = resp.ContentLength
		if err := p.bank.take(ctx, prepaid); err != nil {
			p.refuse(w, ctx, f, capRefusal(err), start)
			return
		}
	}
	for _, h := range returned {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	if q.method == http.MethodHead {
		f.Outcome = store.EgressFetched
		p.record(ctx, f, start)
		return
	}
	hash := sha256.New()
	var file *pending
	keep := cacheable && resp.StatusCode == http.StatusOK
	// A fill is filed only when it matches the registry's digest; the
	// last chunk is held back until it does, so a tool never receives
	// the whole of an object that does not.
	var want *expected
	var check gohash.Hash
	if keep {
		if want = p.expect(ctx, q); want == nil {
			keep = false
		} else {
			file = p.cfg.Cache.begin()
			check = want.hasher()
		}
	}
	var learn *bytes.Buffer
	if p.cfg.Registries[q.host] == NPM && q.method == http.MethodGet && resp.StatusCode == http.StatusOK && isPackument(q.path) {
		learn = &bytes.Buffer{}
	}
	pooled, spare := buffers.Get().(*[bufSize]byte), buffers.Get().(*[bufSize]byte)
	defer buffers.Put(pooled)
	defer buffers.Put(spare)
	bufs, cur := [2][]byte{pooled[:], spare[:]}, 0
	var held []byte
	var n int64
	var ferr *refusal
	for {
		buf := bufs[cur]
		k, rerr := resp.Body.Read(buf)
		if k > 0 {
			if n+int64(k) > p.cfg.MaxResponseBytes {
				ferr = refuse(protocol.CodeResponseTooLarge, "the upstream response exceeds egress.max_response_bytes")
				break
			}
			if prepaid == 0 {
				if err := p.bank.take(ctx, int64(k)); err != nil {
					ferr = capRefusal(err)
					break
				}
			}
			hash.Write(buf[:k])
			if keep {
				file.Write(buf[:k])
				if check != nil {
					check.Write(buf[:k])
				}
			}
			if learn != nil && learn.Len()+k <= maxPackument {
				learn.Write(buf[:k])
			}
			out := buf[:k]
			if keep {
				// Send what was held, hold this chunk; the next read
				// goes into the other buffer.
				out, held, cur = held, buf[:k], cur^1
			}
			if _, err := w.Write(out); err != nil {
				ferr = &refusal{code: protocol.CodeTargetUnavailable, reason: "the tool hung up"}
				n += int64(k)
				break
			}
			n += int64(k)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			ferr = &refusal{code: protocol.CodeTargetUnavailable, reason: "upstream body: " + rerr.Error()}
			if ctx.Err() != nil {
				ferr.code = protocol.CodeTargetTimeout
			}
			break
		}
	}
	f.Bytes = n
	if prepaid > n {
		p.bank.give(prepaid - n)
	}
	if ferr != nil || (resp.ContentLength >= 0 && n != resp.ContentLength) {
		if keep {
			file.abort()
		}
		if ferr == nil {
			ferr = &refusal{code: protocol.CodeTargetUnavailable, reason: "upstream body shorter than its length"}
		}
		f.Outcome, f.Code, f.Reason = store.EgressFailed, string(ferr.code), ferr.reason
		p.record(ctx, f, start)
		if ferr.code == protocol.CodeLimitExceeded && p.cfg.OnRefused != nil {
			p.cfg.OnRefused(Refusal{EpisodeID: p.cfg.EpisodeID, Method: f.Method, Host: f.Host, Code: ferr.code, Reason: ferr.reason})
		}
		panic(http.ErrAbortHandler) // the tool sees a cut body, never a short one
	}
	f.Outcome, f.SHA256 = store.EgressFetched, hex.EncodeToString(hash.Sum(nil))
	if keep {
		name, whole := file.path()
		if !whole && check == nil {
			file.abort() // a zip that could not be kept cannot be checked: served, not filed
		} else if !want.matches(check, name) {
			file.abort()
			f.Outcome, f.Code = store.EgressFailed, string(protocol.CodeDigestMismatch)
			f.Reason = "the registry's bytes for " + printable(want.what) + " do not match its published digest"
			p.record(ctx, f, start)
			if p.cfg.OnRefused != nil {
				p.cfg.OnRefused(Refusal{EpisodeID: p.cfg.EpisodeID, Method: f.Method, Host: f.Host, Code: protocol.CodeDigestMismatch, Reason: f.Reason})
			}
			panic(http.ErrAbortHandler) // the held chunk is never sent
		} else {
			_ = file.commit(key, entry{SHA256: f.SHA256, Size: n, ContentType: resp.Header.Get("Content-Type")})
		}
		if _, err := w.Write(held); err != nil {
			f.Outcome, f.Code, f.Reason = store.EgressFailed, string(protocol.CodeTargetUnavailable), "the tool hung up"
		}
	}
	if learn != nil && learn.Len() < maxPackument {
		p.npm.learn(learn.Bytes())
	}
	p.record(ctx, f, start)
}

// takenDown asks the registry whether it still serves a cached object (a
// HEAD, with the fixed headers of a cacheable fetch): 404 or 410 is a
// takedown; a 200 renews the entry; anything else (the registry down, an
// error) keeps serving it, since the bytes are verified either way.
func (p *Proxy) takenDown(ctx context.Context, q request, e entry) bool {
	u := url.URL{Scheme: "https", Host: q.host, RawPath: q.path}
	u.Path, _ = url.PathUnescape(q.path)
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u.String(), nil)
	if err != nil {
		return false
	}
	upHeaders(req.Header, nil, true)
	if p.up.Add(outbound(req)) > p.cfg.MaxUpBytes {
		return false
	}
	resp, err := p.client(q.host).Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusGone:
		return true
	case http.StatusOK:
		p.cfg.Cache.renew(e)
	}
	return false
}

// client is an HTTPS client to host's pinned address: TLS verified
// against host's name, no proxy, no redirects followed, no compression
// (the cache keeps identity bodies).
func (p *Proxy) client(host string) *http.Client {
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.dial(ctx, host)
		},
		TLSClientConfig:        &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, RootCAs: p.cfg.RootCAs},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
		ResponseHeaderTimeout:  p.cfg.Timeout,
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
