package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// HTTPTarget is one trusted HTTP endpoint.
type HTTPTarget struct {
	// BaseURL is scheme://host[:port], no path, query or user info.
	BaseURL string
	Methods []string
	// Paths are globs (see matchGlob) over the request path without its
	// leading slash.
	Paths []string
	// AllowedNets are the networks the host may resolve to. Empty: public
	// unicast addresses only (no loopback, private, link-local, …).
	AllowedNets      []netip.Prefix
	MaxRequestBytes  int64         // default 64 KiB
	MaxResponseBytes int64         // default 1 MiB
	Timeout          time.Duration // whole exchange, body included; default 10 s
	// CAFile holds the PEM roots TLS is verified against (default: the
	// system's). Verification is never off.
	CAFile string
	// Credential is injected by reference: the worker never sees it.
	Credential *Credential
	// RatePerMinute bounds commits on this target (0: unlimited).
	RatePerMinute int
	// ReconcilePath, for mutations, is a GET endpoint that answers 200 if
	// a request with the Idempotency-Key header's value was applied and
	// 404 if it was not.
	ReconcilePath string
	Class         int // 0: 2 for http_read, 3 for http_mutation
}

// Credential names where a secret comes from and which header carries it.
type Credential struct {
	Header string // e.g. "Authorization"
	Prefix string // e.g. "Bearer "
	Env    string // environment variable of the kernel, or
	File   string // a file readable by the kernel only
}

// HTTP is the http_read (class 2) and http_mutation (class 3) adapter. The
// broker resolves the name itself and connects to the address it checked
// (no second lookup an attacker could race), never follows a redirect,
// caps both bodies and the time, and sends the effect id as
// Idempotency-Key.
type HTTP struct {
	Mutation bool
	Targets  map[string]HTTPTarget
	Payloads *Payloads
	// Resolve looks a host name up (default: the system resolver).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)

	mu   sync.Mutex
	sent map[string][]time.Time // per target, commits within the last minute
}

type httpRequest struct {
	Method      string `json:"method"`
	Path        string `json:"path"`
	Query       string `json:"query,omitempty"`
	ContentType string `json:"content_type,omitempty"`
}

// Kind implements Adapter.
func (h *HTTP) Kind() string {
	if h.Mutation {
		return "http_mutation"
	}
	return "http_read"
}

// Class implements Adapter.
func (h *HTTP) Class(target string) (int, error) {
	t, ok := h.Targets[target]
	if !ok {
		return 0, protocol.Errorf(protocol.CodeForbidden, "unknown http target")
	}
	if t.Class != 0 {
		return t.Class, nil
	}
	if h.Mutation {
		return 3, nil
	}
	return 2, nil
}

func (h *HTTP) parse(r Request) (HTTPTarget, httpRequest, *url.URL, error) {
	var req httpRequest
	t, ok := h.Targets[r.TargetID]
	if !ok {
		return t, req, nil, protocol.Errorf(protocol.CodeForbidden, "unknown http target")
	}
	if err := protocol.DecodeStrict(r.Target, &req); err != nil {
		return t, req, nil, err
	}
	base, err := url.Parse(t.BaseURL)
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" || base.User != nil || (base.Path != "" && base.Path != "/") {
		return t, req, nil, protocol.Errorf(protocol.CodeForbidden, "target misconfigured")
	}
	reads := []string{http.MethodGet, http.MethodHead}
	switch {
	case !slices.Contains(t.Methods, req.Method) || h.Mutation == slices.Contains(reads, req.Method):
		return t, req, nil, protocol.Errorf(protocol.CodeForbidden, "method not allowed")
	case !canonicalPath(req.Path):
		return t, req, nil, protocol.Errorf(protocol.CodeInvalidField, "target.path")
	case len(req.Query) > 2048 || strings.ContainsAny(req.Query, "#\x00\r\n "):
		return t, req, nil, protocol.Errorf(protocol.CodeInvalidField, "target.query")
	case len(req.ContentType) > 128 || strings.ContainsAny(req.ContentType, "\r\n\x00"):
		return t, req, nil, protocol.Errorf(protocol.CodeInvalidField, "target.content_type")
	case !h.Mutation && len(r.Payload) > 0:
		return t, req, nil, protocol.Errorf(protocol.CodeInvalidField, "a read has no body")
	}
	allowed := false
	for _, g := range t.Paths {
		allowed = allowed || matchGlob(g, strings.TrimPrefix(req.Path, "/"))
	}
	if !allowed {
		return t, req, nil, protocol.Errorf(protocol.CodeForbidden, "path not allowed")
	}
	if int64(len(r.Payload)) > def(t.MaxRequestBytes, 64<<10) {
		return t, req, nil, protocol.Errorf(protocol.CodeInvalidField, "request body exceeds the target's cap")
	}
	u := *base
	u.Path, u.RawQuery = req.Path, req.Query
	return t, req, &u, nil
}

func def(v, d int64) int64 {
	if v <= 0 {
		return d
	}
	return v
}

// Validate implements Adapter.
func (h *HTTP) Validate(_ context.Context, r Request) error {
	_, _, _, err := h.parse(r)
	return err
}

// Precondition implements Adapter: the target's rate limit. A commit
// refused here leaves the effect ready.
func (h *HTTP) Precondition(_ context.Context, r Request) error {
	t, _, _, err := h.parse(r)
	if err != nil {
		return err
	}
	if t.RatePerMinute <= 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sent == nil {
		h.sent = map[string][]time.Time{}
	}
	now := time.Now()
	recent := slices.DeleteFunc(h.sent[r.TargetID], func(at time.Time) bool { return now.Sub(at) > time.Minute })
	if len(recent) >= t.RatePerMinute {
		h.sent[r.TargetID] = recent
		return protocol.Errorf(protocol.CodeRateLimited, "rate limit")
	}
	h.sent[r.TargetID] = append(recent, now)
	return nil
}

// canonicalPath reports whether p is a request path every server reads the
// same way, so the allow-list matches what the server will serve: absolute,
// at most 2048 bytes, already in the form path.Clean and URL escaping give
// it (no "..", ".", "//" or trailing slash; nothing a URL must escape), and
// none of the bytes servers interpret beyond RFC 3986: no "%" at all (so no
// "%2e", "%2f", "%5c" in any case), no ";" (Tomcat, Jetty and Spring read
// "/public/..;/admin" as "/admin"), no backslash, "?", "#" or control
// characters.
func canonicalPath(p string) bool {
	if !strings.HasPrefix(p, "/") || len(p) > 2048 || strings.ContainsAny(p, "%;\\?#") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= 0x20 || p[i] >= 0x7f {
			return false
		}
	}
	return path.Clean(p) == p && (&url.URL{Path: p}).EscapedPath() == p
}

// specialUse are the ranges a target with no allowed_nets never reaches:
// besides private, loopback, link-local and multicast (the netip checks),
// shared address space (100.64.0.0/10, where a cloud's metadata service
// lives), benchmarking, reserved and documentation ranges, and every IPv6
// form that embeds or routes to an IPv4 address (IPv4-compatible and
// -mapped, NAT64, 6to4, Teredo) or is deprecated site-local.
var specialUse = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",
		"::/96", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
		"2002::/16", "3fff::/20", "fec0::/10",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

func addrAllowed(a netip.Addr, nets []netip.Prefix) bool {
	if len(nets) == 0 {
		if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
			return false
		}
		for _, n := range specialUse {
			if n.Contains(a) {
				return false
			}
		}
		return true
	}
	a = a.Unmap()
	for _, n := range nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// pin resolves host and returns the address to connect to (PinAddress
// with the adapter's resolver and the target's networks).
func (h *HTTP) pin(ctx context.Context, t HTTPTarget, host string) (netip.Addr, error) {
	return PinAddress(ctx, h.Resolve, host, t.AllowedNets)
}

// PinAddress resolves host with resolve (nil: the system resolver) and
// returns the one address to connect to, so no second lookup can be raced.
// Every address the name has must be in nets (empty: public unicast only,
// see addrAllowed): a name that answers with one good and one internal
// address is refused rather than raced. Shared with kernel/egress.
func PinAddress(ctx context.Context, resolve func(ctx context.Context, host string) ([]netip.Addr, error), host string, nets []netip.Prefix) (netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if resolve == nil {
			resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
				return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			}
		}
		if addrs, err = resolve(ctx, host); err != nil || len(addrs) == 0 {
			return netip.Addr{}, protocol.Errorf(protocol.CodeTargetUnavailable, "resolve: %v", err)
		}
	}
	for _, a := range addrs {
		if !addrAllowed(a, nets) {
			return netip.Addr{}, protocol.Errorf(protocol.CodeAddressRefused, "%s resolves to a refused address", host)
		}
	}
	return addrs[0].Unmap(), nil
}

func (h *HTTP) client(ctx context.Context, t HTTPTarget, u *url.URL) (*http.Client, error) {
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	addr, err := h.pin(ctx, t, host)
	if err != nil {
		return nil, err
	}
	tlsCfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeForbidden, "target CA unreadable")
		}
		tlsCfg.RootCAs = x509.NewCertPool()
		if !tlsCfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, protocol.Errorf(protocol.CodeForbidden, "target CA invalid")
		}
	}
	pinned := net.JoinHostPort(addr.String(), port)
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", pinned)
		},
		TLSClientConfig:        tlsCfg,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      false,
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

func (c *Credential) value() (string, error) {
	var v string
	switch {
	case c.Env != "":
		v = os.Getenv(c.Env)
	case c.File != "":
		b, err := os.ReadFile(c.File)
		if err != nil {
			return "", err
		}
		v = strings.TrimSpace(string(b))
	}
	if v == "" || strings.ContainsAny(v, "\r\n") {
		return "", errors.New("credential unavailable")
	}
	return c.Prefix + v, nil
}

// Commit implements Adapter.
func (h *HTTP) Commit(ctx context.Context, r Request) Result {
	t, req, u, err := h.parse(r)
	if err != nil {
		return notCommitted(err, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(def(int64(t.Timeout), int64(10*time.Second))))
	defer cancel()
	c, err := h.client(ctx, t, u)
	if err != nil {
		return notCommitted(err, nil)
	}
	var body io.Reader
	if h.Mutation {
		body = bytes.NewReader(r.Payload)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, u.String(), body)
	if err != nil {
		return notCommitted(protocol.Errorf(protocol.CodeInvalidField, "request: %w", err), nil)
	}
	hr.Header.Set("Idempotency-Key", r.EffectID.String())
	hr.Header.Set("User-Agent", "autonomic-broker")
	if req.ContentType != "" {
		hr.Header.Set("Content-Type", req.ContentType)
	}
	if t.Credential != nil {
		v, err := t.Credential.value()
		if err != nil {
			return notCommitted(protocol.Errorf(protocol.CodeTargetUnavailable, "%w", err), nil)
		}
		hr.Header.Set(t.Credential.Header, v)
	}
	var wrote bool
	var wmu sync.Mutex
	hr = hr.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wmu.Lock(); wrote = true; wmu.Unlock() },
	}))
	// failed is the outcome of an exchange that went wrong: a read changes
	// nothing, and a mutation that never left us changed nothing either;
	// a mutation the server may have received is unknown.
	failed := func(err error, receipt map[string]any) Result {
		wmu.Lock()
		sent := wrote
		wmu.Unlock()
		if h.Mutation && sent {
			return unknown(err, receipt)
		}
		return notCommitted(err, receipt)
	}
	resp, err := c.Do(hr)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return failed(protocol.Errorf(protocol.CodeTargetTimeout, "%w", err), nil)
		}
		return failed(protocol.Errorf(protocol.CodeTargetUnavailable, "%w", err), nil)
	}
	defer resp.Body.Close()
	receipt := map[string]any{"status": resp.StatusCode}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return failed(protocol.Errorf(protocol.CodeRedirectRefused, "status %d", resp.StatusCode), receipt)
	}
	max := def(t.MaxResponseBytes, 1<<20)
	if resp.ContentLength > max {
		return failed(protocol.Errorf(protocol.CodeResponseTooLarge, "content-length %d", resp.ContentLength), receipt)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return failed(protocol.Errorf(protocol.CodeTargetTimeout, "body: %w", err), receipt)
		}
		return failed(protocol.Errorf(protocol.CodeTargetUnavailable, "body: %w", err), receipt)
	}
	if int64(len(b)) > max {
		return failed(protocol.Errorf(protocol.CodeResponseTooLarge, "body over %d bytes", max), receipt)
	}
	d, err := h.Payloads.Put(b)
	if err != nil {
		return failed(fmt.Errorf("storing response: %w", err), receipt)
	}
	receipt["response_digest"], receipt["response_size"] = d, len(b)
	if ct := resp.Header.Get("Content-Type"); len(ct) <= 128 {
		receipt["content_type"] = ct
	}
	return committed(receipt)
}

// Reconcile implements Adapter. A read is never repeated: its observation
// was lost, which changed nothing, so it did not commit. A mutation is
// settled only by the target's own idempotency record.
func (h *HTTP) Reconcile(ctx context.Context, r Request) Result {
	t, _, u, err := h.parse(r)
	if err != nil {
		return unknown(err, nil)
	}
	if !h.Mutation {
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "observation lost in a crash"), nil)
	}
	if t.ReconcilePath == "" {
		return unknown(protocol.Errorf(protocol.CodeCommitUnknown, "target has no idempotency record"), nil)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(def(int64(t.Timeout), int64(10*time.Second))))
	defer cancel()
	c, err := h.client(ctx, t, u)
	if err != nil {
		return unknown(err, nil)
	}
	q := *u
	q.Path, q.RawQuery = t.ReconcilePath, ""
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, q.String(), nil)
	if err != nil {
		return unknown(err, nil)
	}
	hr.Header.Set("Idempotency-Key", r.EffectID.String())
	if t.Credential != nil {
		if v, err := t.Credential.value(); err == nil {
			hr.Header.Set(t.Credential.Header, v)
		}
	}
	resp, err := c.Do(hr)
	if err != nil {
		return unknown(protocol.Errorf(protocol.CodeTargetUnavailable, "%w", err), nil)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return committed(map[string]any{"status": resp.StatusCode, "evidence": "idempotency record"})
	case http.StatusNotFound:
		return notCommitted(protocol.Errorf(protocol.CodeEffectFailed, "target has no record of the request"), nil)
	}
	return unknown(protocol.Errorf(protocol.CodeCommitUnknown, "idempotency record status %d", resp.StatusCode), nil)
}
