package egress

import (
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/store"
)

// The registries this machine reaches, and what the tools fetch.
const (
	goModule   = "github.com/google/uuid@v1.6.0"
	goZipPath  = "/github.com/google/uuid/@v/v1.6.0.zip"
	npmPackage = "is-number@7.0.0"
	npmTarball = "/is-number/-/is-number-7.0.0.tgz"
)

var registries = []string{"proxy.golang.org", "sum.golang.org", "registry.npmjs.org"}

// goEnv is go's environment for one fresh module cache: the module proxy
// in plain HTTP (the egress proxy fetches it over HTTPS and may cache it)
// and the checksum database through the module proxy, as go does by
// default.
func goEnv(dir, goproxy string) []string {
	return []string{
		"GOPROXY=" + goproxy, "GOSUMDB=sum.golang.org", "GONOSUMDB=", "GOPRIVATE=", "GOFLAGS=-modcacherw",
		"GOMODCACHE=" + filepath.Join(dir, "modcache"), "GOPATH=" + filepath.Join(dir, "gopath"),
		"GOCACHE=" + filepath.Join(dir, "gocache"), "GOTOOLCHAIN=local", "GO111MODULE=on",
	}
}

func npmEnv(dir, proxyURL string) []string {
	return []string{
		"npm_config_registry=http://registry.npmjs.org/", "npm_config_proxy=" + proxyURL, "npm_config_https_proxy=" + proxyURL,
		"npm_config_cache=" + filepath.Join(dir, "npmcache"), "npm_config_userconfig=" + filepath.Join(dir, "npmrc"),
		"npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false",
	}
}

// siteNets is what an operator of this machine puts in egress.allowed_nets:
// here the registries' names resolve to a gateway in a reserved range
// (203.0.113.0/24), which the default (public unicast only) refuses — as
// it must; TestPinningRefusesReservedAddresses shows it. Where they
// resolve to public addresses it is empty: the default applies.
func siteNets(t *testing.T) []netip.Prefix { return benchNets(t) }

func benchNets(t testing.TB) []netip.Prefix {
	var nets []netip.Prefix
	for _, h := range registries {
		addrs, err := net.DefaultResolver.LookupNetIP(t.Context(), "ip", h)
		if err != nil {
			continue // sum.golang.org is reached through the module proxy
		}
		for _, a := range addrs {
			if _, err := broker.PinAddress(t.Context(), nil, a.String(), nil); err != nil && !slices.Contains(nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())) {
				nets = append(nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			}
		}
	}
	if len(nets) > 0 {
		t.Logf("the registries resolve to non-public addresses here; egress.allowed_nets = %v", nets)
	}
	return nets
}

func find(l []store.EgressFetch, path string) (store.EgressFetch, bool) {
	for _, f := range l {
		if f.Path == path {
			return f, true
		}
	}
	return store.EgressFetch{}, false
}

// TestPinningRefusesReservedAddresses: the registries with the default
// networks: the proxy resolves the name itself and refuses what it
// resolves to on a machine where that is a reserved range.
func TestPinningRefusesReservedAddresses(t *testing.T) {
	if len(siteNets(t)) == 0 {
		t.Skip("the registries resolve to public addresses on this machine")
	}
	s := openStore(t)
	r := start(t, s, Config{Allow: registries, Timeout: time.Minute})
	code, body, _ := get(t, client(r.url), "http://proxy.golang.org/github.com/google/uuid/@v/list")
	if code != http.StatusBadGateway || !strings.Contains(string(body), "address_refused") {
		t.Fatalf("%d %q", code, body)
	}
}
