package egress

import (
	"regexp"
	"strings"
	"sync"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Registry is the kind of package registry a host serves; a host of a
// known kind is held to that registry's protocol (the paths its clients
// ask for), over plain HTTP and inside terminated tunnels alike, and in
// lockfile-bound mode to the objects the base commit's lockfiles name.
type Registry string

const (
	// GoProxy is a Go module mirror (proxy.golang.org): a module request
	// is admitted only for a module path under one of the code hosts
	// (GoCodeHosts), so the mirror fetches nothing from an origin the
	// worker chose — an attacker's host with data in the path.
	GoProxy Registry = "goproxy"
	// GoProxyCachedOnly is a mirror with proxy.golang.org's /cached-only
	// endpoint, which answers only from what it already holds: module
	// requests are sent there, for any module path.
	GoProxyCachedOnly Registry = "goproxy-cached-only"
	// GoSumDB is the Go checksum database (sum.golang.org).
	GoSumDB Registry = "gosumdb"
	// NPM is an npm registry (registry.npmjs.org): any GET, except in
	// lockfile-bound mode, where only the lock's tarballs pass.
	NPM Registry = "npm"
)

// DefaultRegistries are the hosts whose registry kind the proxy knows.
// (proxy.golang.org is held to code hosts rather than sent to
// /cached-only because mirrors in front of it, as on the build host of
// this project, need not serve that endpoint; an operator whose mirror
// does names it GoProxyCachedOnly in egress.registries.)
func DefaultRegistries() map[string]Registry {
	return map[string]Registry{"proxy.golang.org": GoProxy, "sum.golang.org": GoSumDB, "registry.npmjs.org": NPM}
}

// DefaultGoCodeHosts are the code hosts Go module paths may start with
// (the first path element, or its domain for a vanity host listed here).
func DefaultGoCodeHosts() []string {
	return []string{"github.com", "gitlab.com", "bitbucket.org", "golang.org", "google.golang.org", "cloud.google.com",
		"gopkg.in", "go.uber.org", "go.etcd.io", "k8s.io", "sigs.k8s.io", "go.opentelemetry.io", "honnef.co", "gotest.tools",
		"modernc.org", "mvdan.cc", "go.yaml.in", "filippo.io", "lukechampine.com", "gorm.io"}
}

// A module proxy request names an escaped module path (lower case: an
// upper-case letter is "!" and the letter) and, for an object, an escaped
// version. Anything else on a Go registry host is refused: a path that is
// not the protocol is a way to make the mirror fetch, or to carry data.
var (
	goModulePath = `[a-z0-9!~_.-]+(?:/[a-z0-9!~_.-]+)*`
	goVersion    = `v[a-z0-9!~_.+-]+`
	goListRE     = regexp.MustCompile(`^/(` + goModulePath + `)/@v/list$`)
	goLatestRE   = regexp.MustCompile(`^/(` + goModulePath + `)/@latest$`)
	goObjectRE   = regexp.MustCompile(`^/(` + goModulePath + `)/@v/(` + goVersion + `)\.(?:info|mod|zip)$`)
	sumLookupRE  = regexp.MustCompile(`^/lookup/(` + goModulePath + `)@(` + goVersion + `)$`)
	sumTileRE    = regexp.MustCompile(`^/tile/[0-9]{1,2}/(?:[0-9]{1,2}|data)(?:/x[0-9]{3})*/[0-9]{3}(?:\.p/[0-9]{1,3})?$`)
)

// goSeen are the module versions the mirror served this episode: the
// only ones whose checksum-database lookup may leave. A lookup of any
// other module would make the database fetch it from its origin — the
// same open fetch /cached-only closes on the mirror.
type goSeen struct {
	mu   sync.Mutex
	mods map[string]bool
}

func (s *goSeen) add(modVersion string) {
	s.mu.Lock()
	if s.mods == nil {
		s.mods = map[string]bool{}
	}
	s.mods[modVersion] = true
	s.mu.Unlock()
}

func (s *goSeen) has(modVersion string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mods[modVersion]
}

// goRule holds an admitted request to a Go registry host to its protocol:
// it may rewrite q.path (module requests to /cached-only) and set
// q.goModule (a module version whose successful fetch admits its lookup).
func goRule(kind Registry, q *request, seen *goSeen, codeHosts map[string]bool) *refusal {
	if q.query != "" {
		return refuse(protocol.CodeForbidden, "a query is not part of the Go module protocol")
	}
	path := q.path
	if kind == GoProxy || kind == GoProxyCachedOnly {
		if rest, ok := strings.CutPrefix(path, "/sumdb/sum.golang.org"); ok {
			if rest == "/supported" {
				return nil
			}
			return sumRule(rest, seen)
		}
		var module string
		if m := goObjectRE.FindStringSubmatch(path); m != nil {
			module, q.goModule = m[1], m[1]+"@"+m[2]
		} else if m := goListRE.FindStringSubmatch(path); m != nil {
			module = m[1]
		} else if m := goLatestRE.FindStringSubmatch(path); m != nil {
			module = m[1]
		} else {
			return refuse(protocol.CodeForbidden, "not a Go module proxy request (list, latest, .info, .mod or .zip of a module path)")
		}
		if kind == GoProxyCachedOnly {
			q.path = "/cached-only" + path
			return nil
		}
		first, _, _ := strings.Cut(module, "/")
		if !codeHosts[first] {
			return refuse(protocol.CodeForbidden, "module path "+printable(module)+" is not under a listed code host: the mirror would fetch it from an origin the request names")
		}
		return nil
	}
	return sumRule(path, seen)
}

func sumRule(path string, seen *goSeen) *refusal {
	switch m := sumLookupRE.FindStringSubmatch(path); {
	case m != nil:
		if !seen.has(m[1] + "@" + m[2]) {
			return refuse(protocol.CodeForbidden, "checksum lookup of a module version the mirror has not served in this episode")
		}
		return nil
	case path == "/latest", sumTileRE.MatchString(path):
		return nil
	}
	return refuse(protocol.CodeForbidden, "not a Go checksum database request (latest, tile or lookup)")
}
