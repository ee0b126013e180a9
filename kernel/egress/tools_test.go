package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
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

// tool runs argv in dir with a clean environment pointing every proxy
// variable at proxyURL; it returns the combined output and the error.
func tool(t *testing.T, dir, proxyURL string, env []string, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	home := filepath.Join(dir, "home")
	os.MkdirAll(home, 0o700)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "https_proxy=" + proxyURL,
		"NO_PROXY=", "no_proxy=",
	}, env...)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v timed out: %s", argv, out)
	}
	return string(out), err
}

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

// TestDependenciesThroughTheProxy: real tools against the real registries
// through the proxy on a loopback TCP listener (on the host: the domain
// plumbing, the egress socket and its bridge, is another branch's).
// go mod download and npm install succeed and every fetch is in the
// ledger; a second episode is served from the shared cache (its ledger
// says cached: the proxy did not contact the registry for those objects);
// with the registry off the allow list the tool fails with the proxy's
// reason; publishing methods, bodies, other ports and a redirect to
// another host are refused and counted; CONNECT tunnels work and are
// counted, not cached.
func TestDependenciesThroughTheProxy(t *testing.T) {
	for _, bin := range []string{"go", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is needed: %v", bin, err)
		}
	}
	s := openStore(t)
	cache, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Allow: registries, Cache: cache, Timeout: 2 * time.Minute, AllowedNets: siteNets(t)}

	for i, want := range []string{store.EgressFetched, store.EgressCached} {
		t.Run(fmt.Sprintf("episode %d", i+1), func(t *testing.T) {
			r := start(t, s, cfg)
			dir := t.TempDir()
			out, err := tool(t, dir, r.url, goEnv(dir, "http://proxy.golang.org"), "go", "mod", "download", "-json", goModule)
			if err != nil || !strings.Contains(out, `"Zip"`) {
				t.Fatalf("go mod download: %v\n%s", err, out)
			}
			os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"t","version":"1.0.0","private":true}`), 0o600)
			out, err = tool(t, dir, r.url, npmEnv(dir, r.url), "npm", "install", "--no-save", npmPackage)
			if err != nil {
				t.Fatalf("npm install: %v\n%s", err, out)
			}
			if _, err := os.Stat(filepath.Join(dir, "node_modules", "is-number", "package.json")); err != nil {
				t.Fatalf("npm installed nothing: %v\n%s", err, out)
			}
			l := r.ledger(t, s)
			for _, p := range []string{goZipPath, "/github.com/google/uuid/@v/v1.6.0.mod", npmTarball} {
				f, ok := find(l, p)
				if !ok || f.Outcome != want || f.Status != 200 || f.Bytes == 0 || len(f.SHA256) != 64 {
					t.Errorf("%s: %+v (want %s)", p, f, want)
				}
			}
			if f, ok := find(l, "/is-number"); !ok || f.Outcome != store.EgressFetched || f.Host != "registry.npmjs.org" {
				t.Errorf("the npm packument (mutable, never cached): %+v", f)
			}
			for _, f := range l {
				if f.Outcome == store.EgressRefused || f.Outcome == store.EgressFailed {
					t.Errorf("unexpected %s: %+v", f.Outcome, f)
				}
			}
			for _, f := range l {
				t.Logf("episode %d: %s %s%s %d %s %d bytes", i+1, f.Method, f.Host, f.Path, f.Status, f.Outcome, f.Bytes)
			}
		})
	}

	t.Run("off the allow list", func(t *testing.T) {
		c := cfg
		c.Allow = []string{"proxy.golang.org", "sum.golang.org"} // no npm
		r := start(t, s, c)
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"t","version":"1.0.0","private":true}`), 0o600)
		out, err := tool(t, dir, r.url, npmEnv(dir, r.url), "npm", "install", "--no-save", "--fetch-retries=0", npmPackage)
		if err == nil || !strings.Contains(out, "403") {
			t.Fatalf("npm install off the allow list: %v\n%s", err, out)
		}
		c.Allow = []string{"registry.npmjs.org"} // no Go
		r2 := start(t, s, c)
		out, err = tool(t, dir, r2.url, goEnv(dir, "http://proxy.golang.org"), "go", "mod", "download", goModule)
		if err == nil || !strings.Contains(out, "not on the policy's egress allowlist") {
			t.Fatalf("go off the allow list: %v\n%s", err, out)
		}
		for _, x := range []*running{r, r2} {
			l := x.ledger(t, s)
			if len(l) == 0 || l[0].Outcome != store.EgressRefused || len(x.refusals()) == 0 {
				t.Fatalf("refusal not counted: %+v", l)
			}
		}
	})

	t.Run("tunnel", func(t *testing.T) {
		r := start(t, s, cfg)
		dir := t.TempDir()
		out, err := tool(t, dir, r.url, goEnv(dir, "https://proxy.golang.org"), "go", "mod", "download", "-json", goModule)
		if err != nil {
			t.Fatalf("go mod download over CONNECT: %v\n%s", err, out)
		}
		l := r.ledger(t, s)
		var in int64
		for _, f := range l {
			if f.Kind != store.EgressTunnel || f.Host != "proxy.golang.org" || f.Path != "" || f.SHA256 != "" {
				t.Fatalf("tunnel row: %+v", f)
			}
			in += f.Bytes
		}
		r.p.Close()
		used, _ := s.EgressUsed(t.Context(), r.episode)
		if in < 10000 || used != in {
			t.Fatalf("tunnels delivered %d bytes, %d charged", in, used)
		}
	})

	t.Run("pinning refuses reserved addresses", func(t *testing.T) {
		// The same registries with the default networks: the proxy
		// resolves the name itself and refuses what it resolves to here.
		if len(cfg.AllowedNets) == 0 {
			t.Skip("the registries resolve to public addresses on this machine")
		}
		c := cfg
		c.AllowedNets = nil
		r := start(t, s, c)
		code, body, _ := get(t, client(r.url), "http://proxy.golang.org/github.com/google/uuid/@v/list")
		if code != http.StatusBadGateway || !strings.Contains(string(body), "address_refused") {
			t.Fatalf("%d %q", code, body)
		}
	})

	t.Run("refused and counted", func(t *testing.T) {
		r := start(t, s, cfg)
		send := func(req string) (int, string) {
			c, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			io.WriteString(c, req)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("%q: %v", req, err)
			}
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		reqs := []string{
			"POST http://registry.npmjs.org/-/v1/login HTTP/1.1\r\nHost: registry.npmjs.org\r\nContent-Length: 2\r\n\r\n{}",
			"PUT http://registry.npmjs.org/is-number HTTP/1.1\r\nHost: registry.npmjs.org\r\nContent-Length: 2\r\n\r\n{}",
			"GET http://registry.npmjs.org/is-number HTTP/1.1\r\nHost: registry.npmjs.org\r\nContent-Length: 5\r\n\r\nhello",
			"CONNECT registry.npmjs.org:22 HTTP/1.1\r\nHost: registry.npmjs.org:22\r\n\r\n",
			"CONNECT registry.npmjs.org:80 HTTP/1.1\r\nHost: registry.npmjs.org:80\r\n\r\n",
			"GET http://github.com/ HTTP/1.1\r\nHost: github.com\r\n\r\n",
		}
		for _, q := range reqs {
			if code, body := send(q); code != http.StatusForbidden || !strings.HasPrefix(body, "autonomic egress proxy: ") {
				t.Errorf("%q: %d %q", strings.SplitN(q, "\r\n", 2)[0], code, body)
			}
		}
		// A redirect to another host: the registries here do not
		// redirect, so an HTTPS upstream on loopback does.
		up := newUpstream(t, registry(nil))
		rr := start(t, s, up.config("example.com"))
		code, body, _ := get(t, client(rr.url), "http://example.com/away")
		if code != http.StatusForbidden || !strings.Contains(string(body), "redirect_refused") {
			t.Errorf("redirect to another host: %d %q", code, body)
		}
		l := r.ledger(t, s)
		if len(l) != len(reqs) || len(r.refusals()) != len(reqs) {
			t.Fatalf("%d ledger rows, %d signals, want %d", len(l), len(r.refusals()), len(reqs))
		}
		if l := rr.ledger(t, s); len(l) != 1 || l[0].Code != "redirect_refused" || len(rr.refusals()) != 1 {
			t.Fatalf("redirect not counted: %+v", l)
		}
	})
}
