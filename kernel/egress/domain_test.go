package egress

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	agent "github.com/autonomic-kernel/autonomic/agents"
	"github.com/autonomic-kernel/autonomic/agents/agentrootfs"
	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/seccomp"
	"github.com/autonomic-kernel/autonomic/store"
)

// world is a launcher (internal/testbed, this tree's) with the agents
// rootfs named "agents", the shipped agent seccomp profile compiled, and
// the package's store.
type world struct {
	bed   *testbed.Bed
	d     *domain.Linux
	agent []byte
	s     *store.Postgres
	seq   atomic.Int64
}

func newWorld(t *testing.T) *world {
	t.Helper()
	privileged.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bed, err := testbed.New(ctx, testbed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			bed.RemoveCgroups()
			t.Logf("testbed kept for inspection: %s", bed.Dir)
			return
		}
		bed.Close()
	})
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dir, digest, entry, err := agentrootfs.Build(ctx, mod, "")
	if err != nil || !entry {
		t.Fatalf("agents rootfs (autonomic-entry added: %v): %v", entry, err)
	}
	t.Logf("agents rootfs %s in %s", dir, time.Since(start).Round(time.Millisecond))
	if err := bed.NameRootfs("agents", dir, digest); err != nil {
		t.Fatal(err)
	}
	prof, err := seccomp.Shipped("agent")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := seccomp.Compile(prof, seccomp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &world{bed: bed, d: bed.Domains(), agent: prog.Bytes(), s: openStore(t)}
}

// inDomain is one episode: a proxy with cfg for a new episode, served on
// its egress socket, which the launcher binds at /run/autonomic/egress.sock
// in a one-shot domain on the agents rootfs under the agent profile; the
// worker is autonomic-entry bridging 127.0.0.1:8788 to it with the
// agent profiles' EgressEnv (plus env), running bash -c script.
type inDomain struct {
	*running
	out        string
	exit       *protocol.Exited
	violations []protocol.Violation
}

func (w *world) run(t *testing.T, cfg Config, script string, env ...string) *inDomain {
	t.Helper()
	id := fmt.Sprintf("egress-%d-%d", os.Getpid(), w.seq.Add(1))
	ln, err := broker.Listen(filepath.Join(w.bed.Sockets, id+".sock"), w.bed.OwnerUID, w.bed.OwnerGID)
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, w.s, cfg, ln)
	if _, err := w.bed.Workspace(id, nil); err != nil {
		t.Fatal(err)
	}
	argv := []string{agent.EntryPath, "--bridge", agent.EgressBridgeAddr + "=" + agent.EgressSocket}
	argv = append(argv, agent.EgressCAArgs(r.p.CACertPEM())...)
	for _, kv := range append(agent.EgressEnv(), env...) {
		argv = append(argv, "--env", kv)
	}
	argv = append(argv, "--", "/bin/bash", "-c", script)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	d, err := w.d.Create(ctx, domain.Spec{ID: id, Generation: 1, WorkspaceID: id, EgressSocket: id, Rootfs: "agents",
		Seccomp: w.agent, OneShot: true, Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := d.Wait()
	if err != nil {
		t.Fatal(err)
	}
	out := string(d.Output())
	t.Logf("domain %s (%s):\n%s", id, time.Since(start).Round(time.Millisecond), out)
	return &inDomain{running: r, out: out, exit: ex, violations: d.Violations()}
}

func (x *inDomain) has(t *testing.T, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(x.out, l+"\n") {
			t.Errorf("the worker's output lacks %q", l)
		}
	}
}

// counting is a resolver that counts its lookups per host: the proxy
// resolves a name once per upstream connection, so the count is how often
// it contacted the registry.
type counting struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counting) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

// fetchScript fetches a Go module and an npm package with the real tools,
// as an agent would, through the proxy the environment names.
const fetchScript = `set -u
cd "$HOME"
echo "TOOLS $(go version | cut -d' ' -f3) node $(node --version) npm $(npm --version)"
go mod download -json ` + goModule + ` > go.json 2>&1; echo "GO_EXIT=$?"; grep -q '"Zip"' go.json && echo GO_ZIP=ok || cat go.json
printf '{"name":"t","version":"1.0.0","private":true}' > package.json
npm install --no-save --fetch-retries=0 ` + npmPackage + ` > npm.log 2>&1; echo "NPM_EXIT=$?"
test -f node_modules/is-number/package.json && echo NPM_INSTALLED=ok || cat npm.log
`

// rawRequest is one raw HTTP request sent to the bridge from inside the
// domain (bash's /dev/tcp: no tool's politeness in between); the worker
// prints its status line and the last line of the answer.
func rawRequest(name, raw string) string {
	return fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/8788 && { echo %s | base64 -d >&3; r=$(timeout 30 cat <&3 | tr -d '\r'); exec 3<&-; echo "REQ %s $(printf '%%s\n' "$r" | head -1) | $(printf '%%s\n' "$r" | tail -1)"; }
`, base64.StdEncoding.EncodeToString([]byte(raw)), name)
}

// direct tries a TCP connection from inside the domain to addr, around the
// proxy.
func direct(ip, port string) string {
	return fmt.Sprintf("(exec 5<>/dev/tcp/%[1]s/%[2]s) 2>/dev/null && echo 'DIRECT %[1]s:%[2]s=open' || echo 'DIRECT %[1]s:%[2]s=refused'\n", ip, port)
}

// TestDependenciesThroughTheProxy: inside real domains (this tree's
// launcher, the agents rootfs, the agent seccomp profile, the proxy on the
// episode's egress socket bridged by autonomic-entry, the agent profiles'
// proxy environment), the real go and npm fetch from the real registries.
//
//   - Episode 1: go mod download and npm install succeed through the proxy
//     and every fetch is in the ledger; go over CONNECT (GOPROXY=https)
//     is refused — a registry with rules is reached in plain http only,
//     where its paths are read — and recorded; direct connections around the
//     proxy — to the registry's own address and to 1.1.1.1 — fail and are
//     the launcher's violation frames.
//   - Episode 2, same host cache: the module and tarball are served from
//     the cache, and the registry is contacted only for the mutable
//     objects (counted: one name lookup per upstream connection).
//   - With the registries off the allow list both tools fail with the
//     proxy's reason, counted.
//   - POST and PUT (with a body and without), a GET with a body, CONNECT
//     to ports 22 and 80, a host off the list and a redirect to another
//     host are each refused with the proxy's reason, recorded and
//     signalled.
func TestDependenciesThroughTheProxy(t *testing.T) {
	w := newWorld(t)
	cache, err := OpenCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	regIPs, err := net.DefaultResolver.LookupNetIP(t.Context(), "ip4", "registry.npmjs.org")
	if err != nil || len(regIPs) == 0 {
		t.Fatalf("resolving the npm registry: %v", err)
	}
	regIP := regIPs[0].String()
	res := &counting{n: map[string]int{}}
	cfg := Config{Allow: registries, Cache: cache, Timeout: 2 * time.Minute, AllowedNets: siteNets(t),
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			res.mu.Lock()
			res.n[host]++
			res.mu.Unlock()
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}}
	npmQuiet := []string{"npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false"}

	for i, want := range []string{store.EgressFetched, store.EgressCached} {
		t.Run(fmt.Sprintf("episode %d", i+1), func(t *testing.T) {
			before := res.total()
			script := fetchScript
			if i == 0 {
				script += `GOPROXY=https://proxy.golang.org GOMODCACHE="$HOME/tunnelled" go mod download ` + goModule + `; echo "TUNNEL_EXIT=$?"
` + direct(regIP, "443") + direct(regIP, "80") + direct("1.1.1.1", "443")
			}
			x := w.run(t, cfg, script, npmQuiet...)
			x.has(t, "GO_EXIT=0", "GO_ZIP=ok", "NPM_EXIT=0", "NPM_INSTALLED=ok")
			if !strings.Contains(x.out, "TOOLS go1.") {
				t.Errorf("the rootfs's tools did not run")
			}
			l := x.ledger(t, w.s)
			for _, p := range []string{goZipPath, "/github.com/google/uuid/@v/v1.6.0.mod", npmTarball} {
				f, ok := find(l, p)
				if !ok || f.Outcome != want || f.Status != 200 || f.Bytes == 0 || len(f.SHA256) != 64 {
					t.Errorf("%s: %+v (want %s)", p, f, want)
				}
			}
			if f, ok := find(l, "/is-number"); !ok || f.Outcome != store.EgressFetched || f.Host != "registry.npmjs.org" {
				t.Errorf("the npm packument (mutable, never cached): %+v", f)
			}
			upstream, cached, tunnels := 0, 0, int64(0)
			for _, f := range l {
				t.Logf("episode %d: %s %s %s%s %d %s %d bytes", i+1, f.Kind, f.Method, f.Host, f.Path, f.Status, f.Outcome, f.Bytes)
				switch {
				case f.Outcome == store.EgressRefused || f.Outcome == store.EgressFailed:
					t.Errorf("unexpected %s: %+v", f.Outcome, f)
				case f.Kind == store.EgressTunnel:
					// Terminated: the tunnel opens no upstream connection
					// itself, its inner requests (own rows) do.
					tunnels += f.Bytes
					if (f.Host != "proxy.golang.org" && f.Host != "registry.npmjs.org") || f.Path != "" || f.SHA256 != "" {
						t.Errorf("tunnel row: %+v", f)
					}
				case f.Outcome == store.EgressCached:
					cached++
				default:
					upstream++
					if f.Host == "proxy.golang.org" && (strings.HasSuffix(f.Path, ".zip") || strings.HasSuffix(f.Path, ".mod")) {
						// Filed only once the checksum database, asked by
						// the proxy itself, agrees: one more connection.
						upstream++
					}
				}
			}
			contacted := res.total() - before
			t.Logf("episode %d: %d ledger rows, %d served from the cache, %d upstream connections (%d tunnel bytes)", i+1, len(l), cached, contacted, tunnels)
			if contacted != upstream {
				t.Errorf("the proxy contacted the registries %d times for %d uncached fetches", contacted, upstream)
			}
			if refs := x.refusals(); len(refs) != 0 {
				t.Errorf("refusals: %+v", refs)
			}
			if i == 0 {
				x.has(t, "TUNNEL_EXIT=0", "DIRECT "+regIP+":443=refused", "DIRECT "+regIP+":80=refused", "DIRECT 1.1.1.1:443=refused")
				// The tunnelled download is served inside TLS from the cache
				// the plain download filled.
				if tunnels < 10000 || cached == 0 {
					t.Errorf("episode 1: %d bytes through tunnels, %d cached rows", tunnels, cached)
				}
				var got []string
				for _, v := range x.violations {
					got = append(got, v.Syscall+" "+v.Destination)
				}
				if want := []string{"connect " + regIP + ":443", "connect " + regIP + ":80", "connect 1.1.1.1:443"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("violations %q, want %q", got, want)
				}
			} else {
				if cached < 3 {
					t.Errorf("episode 2: only %d fetches served from the cache", cached)
				}
				if len(x.violations) != 0 {
					t.Errorf("violations: %+v", x.violations)
				}
			}
		})
	}

	t.Run("off the allow list", func(t *testing.T) {
		c := cfg
		c.Allow = []string{"sum.golang.org"} // neither the module proxy nor npm
		x := w.run(t, c, fetchScript, npmQuiet...)
		// Refused at CONNECT: the tools print the status, the reason is
		// in the refusal and its row.
		if strings.Contains(x.out, "GO_EXIT=0") || strings.Contains(x.out, "NPM_EXIT=0") || !strings.Contains(x.out, "Forbidden") {
			t.Errorf("the tools were not refused")
		}
		for _, r := range x.refusals() {
			if !strings.Contains(r.Reason, "not on the policy's egress allowlist") {
				t.Errorf("refusal %+v", r)
			}
		}
		l := x.ledger(t, w.s)
		hosts := map[string]bool{}
		for _, f := range l {
			if f.Outcome != store.EgressRefused || f.Code != string(protocol.CodeForbidden) {
				t.Errorf("row %+v", f)
			}
			hosts[f.Host] = true
		}
		if !hosts["proxy.golang.org"] || !hosts["registry.npmjs.org"] || len(x.refusals()) != len(l) {
			t.Errorf("refusals not counted: %d rows %v, %d signals", len(l), hosts, len(x.refusals()))
		}
	})

	t.Run("refused and counted", func(t *testing.T) {
		reqs := [][3]string{
			{"POST", "POST http://registry.npmjs.org/-/v1/login HTTP/1.1\r\nHost: registry.npmjs.org\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", "request bodies are refused"},
			{"PUT", "PUT http://registry.npmjs.org/is-number HTTP/1.1\r\nHost: registry.npmjs.org\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", "request bodies are refused"},
			{"POST-empty", "POST http://registry.npmjs.org/-/v1/login HTTP/1.1\r\nHost: registry.npmjs.org\r\nConnection: close\r\n\r\n", "method POST is refused"},
			{"PUT-empty", "PUT http://registry.npmjs.org/is-number HTTP/1.1\r\nHost: registry.npmjs.org\r\nConnection: close\r\n\r\n", "method PUT is refused"},
			{"GET-with-body", "GET http://registry.npmjs.org/is-number HTTP/1.1\r\nHost: registry.npmjs.org\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello", "request bodies are refused"},
			{"CONNECT-22", "CONNECT registry.npmjs.org:22 HTTP/1.1\r\nHost: registry.npmjs.org:22\r\n\r\n", "CONNECT is allowed to port 443 only"},
			{"CONNECT-80", "CONNECT registry.npmjs.org:80 HTTP/1.1\r\nHost: registry.npmjs.org:80\r\n\r\n", "CONNECT is allowed to port 443 only"},
			{"GET-unlisted", "GET http://github.com/ HTTP/1.1\r\nHost: github.com\r\nConnection: close\r\n\r\n", "host github.com is not on the policy's egress allowlist"},
		}
		script := ""
		for _, q := range reqs {
			script += rawRequest(q[0], q[1])
		}
		x := w.run(t, cfg, script)
		for _, q := range reqs {
			if !strings.Contains(x.out, "REQ "+q[0]+" HTTP/1.1 403 Forbidden | autonomic egress proxy: "+q[2]) {
				t.Errorf("%s: not refused with %q", q[0], q[2])
			}
		}
		// A redirect to another host: the registries here do not
		// redirect, so an HTTPS upstream on the host's loopback does,
		// reached by the proxy (never by the domain) as example.com.
		up := newUpstream(t, registry(nil))
		y := w.run(t, up.config("example.com"), rawRequest("redirect", "GET http://example.com/away HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"))
		if !strings.Contains(y.out, "REQ redirect HTTP/1.1 403 Forbidden | autonomic egress proxy: ") || !strings.Contains(y.out, "other.example.org") {
			t.Errorf("redirect to another host not refused")
		}
		l := x.ledger(t, w.s)
		if len(l) != len(reqs) || len(x.refusals()) != len(reqs) {
			t.Errorf("%d ledger rows, %d signals, want %d", len(l), len(x.refusals()), len(reqs))
		}
		for _, f := range l {
			if f.Outcome != store.EgressRefused {
				t.Errorf("row %+v", f)
			}
		}
		if l := y.ledger(t, w.s); len(l) != 1 || l[0].Code != string(protocol.CodeRedirectRefused) || len(y.refusals()) != 1 || up.count("/away") != 1 {
			t.Errorf("redirect not counted: %+v", l)
		}
		for _, z := range []*inDomain{x, y} {
			if len(z.violations) != 0 {
				t.Errorf("violations: %+v", z.violations)
			}
		}
	})
}
