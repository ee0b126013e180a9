package broker

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestHTTPPathNormalisation: a path is matched against the allow-list only
// if every server reads it as written. "/public/..;/admin" survived
// path.Clean and matched public/** while Tomcat, Jetty and Spring serve
// /admin; encoded dots and slashes (any case), backslashes and anything
// whose normalised form differs from the raw one are refused before
// matching.
func TestHTTPPathNormalisation(t *testing.T) {
	e := newEnv(t, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &HTTP{Payloads: e.payloads, Targets: map[string]HTTPTarget{"docs": {
			BaseURL: "http://127.0.0.1:1", Methods: []string{"GET"}, Paths: []string{"public/**"}, AllowedNets: loopback}}})
	})
	prep := func(p string) *protocol.WorkerResponse {
		return e.do(prepareReq(e, "http_read", "docs", map[string]string{"method": "GET", "path": p}, nil))
	}
	mustOK(t, prep("/public/a/b.json"))
	for _, p := range []string{
		"/public/..;/admin", "/public/;/admin", "/public/a;jsessionid=1", "/public;/x",
		"/public/%2e%2e/admin", "/public/%2E%2E/admin", "/public/%2fadmin", "/public/%2Fadmin", "/public/%252e%252e/admin",
		"/public/%5cadmin", "/public/..%2fadmin", "/public/.%2e/admin",
		"/public\\..\\admin", "/public/\\admin",
		"/public/../admin", "/public/./a", "/public//a", "/public/a/", "//public/a", "/public/a/..",
		"/public/a b", "/public/\u00e9", "/public/a\x7f", "/public/a\t", "/public/a?x=1", "/public/a#f",
		"public/a", "",
	} {
		t.Run(fmt.Sprintf("%q", p), func(t *testing.T) {
			r := prep(p)
			if r.OK {
				t.Fatalf("%q was admitted", p)
			}
			if r.Error.Code != protocol.CodeInvalidField {
				t.Fatalf("%q: %s, want invalid_field (refused before matching)", p, r.Error.Code)
			}
		})
	}
}

// TestSpecialUseAddressesRefused: with no allowed_nets a target reaches
// public unicast addresses only. Besides private, loopback and link-local
// ranges, shared address space (one cloud's metadata address lives in
// 100.64.0.0/10), benchmarking and reserved IPv4 ranges and every IPv6 form
// that embeds an IPv4 address (NAT64 reaches 169.254.169.254 through a
// gateway) are refused — checked on the address itself, and end to end
// through a name that resolves there.
func TestSpecialUseAddressesRefused(t *testing.T) {
	refused := []string{
		"100.64.0.1", "100.100.100.200", "100.127.255.254", "198.18.0.1", "198.19.255.255", "240.0.0.1", "255.255.255.254",
		"255.255.255.255", "0.0.0.0", "0.1.2.3", "192.0.0.170", "192.0.2.1", "198.51.100.7", "203.0.113.9", "192.88.99.1",
		"10.0.0.1", "172.16.0.1", "192.168.1.1", "127.0.0.1", "169.254.169.254", "224.0.0.1",
		"64:ff9b::a9fe:a9fe", "64:ff9b::808:808", "64:ff9b:1::1", "2002:a9fe:a9fe::1", "2002:808:808::1",
		"::a9fe:a9fe", "::808:808", "::ffff:169.254.169.254", "::ffff:8.8.8.8", "fec0::1", "feff::1",
		"2001::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:db8::1", "100::1", "3fff::1",
		"::1", "::", "fe80::1", "fc00::1", "fd12::1", "ff02::1",
	}
	allowed := []string{"8.8.8.8", "1.1.1.1", "100.128.0.1", "100.63.255.255", "198.20.0.1", "223.255.255.1",
		"2606:4700::1111", "2a00:1450:4001::200e", "2001:4860:4860::8888"}
	for _, s := range refused {
		if addrAllowed(netip.MustParseAddr(s), nil) {
			t.Errorf("%s is allowed by default", s)
		}
	}
	for _, s := range allowed {
		if !addrAllowed(netip.MustParseAddr(s), nil) {
			t.Errorf("public %s is refused", s)
		}
	}
	// End to end: a configured name that resolves to one of them is
	// refused at commit, before any connection.
	dns := map[string]netip.Addr{"cgnat": netip.MustParseAddr("100.100.100.200"),
		"nat64": netip.MustParseAddr("64:ff9b::a9fe:a9fe"), "sixtofour": netip.MustParseAddr("2002:a9fe:a9fe::1"),
		"mapped": netip.MustParseAddr("::ffff:169.254.169.254"), "sitelocal": netip.MustParseAddr("fec0::1")}
	e := newEnv(t, func(e *env, cfg *Config) {
		targets := map[string]HTTPTarget{}
		for host := range dns {
			targets[host] = HTTPTarget{BaseURL: "http://" + host + ".test", Methods: []string{"GET"}, Paths: []string{"**"}, Timeout: time.Second}
		}
		cfg.Adapters = append(cfg.Adapters, &HTTP{Payloads: e.payloads, Targets: targets,
			Resolve: func(_ context.Context, h string) ([]netip.Addr, error) {
				return []netip.Addr{dns[strings.TrimSuffix(h, ".test")]}, nil
			}})
	})
	for host := range dns {
		t.Run(host, func(t *testing.T) {
			p := mustOK(t, e.do(prepareReq(e, "http_read", host, map[string]string{"method": "GET", "path": "/latest/meta-data"}, nil)))
			mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
			wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeAddressRefused)
		})
	}
}
