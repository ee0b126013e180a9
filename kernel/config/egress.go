package config

import (
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/autonomic-kernel/autonomic/kernel/policy"
)

// The egress proxy's settings (issue 14): where the shared registry cache
// lives, what one episode and one response may bring in, and the
// operator's allow list — the ceiling every policy's egress grant is
// intersected with. Kept in this file, apart from the other sections.

// Egress configures kernel/egress. Absent keys take the defaults below.
type Egress struct {
	// CacheDir holds the content-addressed cache of immutable registry
	// objects every episode on this host shares. Default
	// <state_dir>/egress-cache.
	CacheDir string `json:"cache_dir"`
	// Allow is the operator's ceiling: a policy's egress.allow grants
	// only the hosts also listed here. Absent: DefaultEgressAllow, the
	// public package registries.
	Allow []string `json:"allow"`
	// AllowedNets are the networks the registries' names may resolve to
	// (CIDR prefixes). Empty: public unicast addresses only, as for the
	// broker's HTTP targets. A site whose registries sit behind a mirror
	// or gateway on a private address lists it here.
	AllowedNets []string `json:"allowed_nets"`
	// MaxBytesPerEpisode caps what one episode's fetches deliver into its
	// domain (a policy's egress.max_bytes may lower it).
	MaxBytesPerEpisode int `json:"max_bytes_per_episode"`
	// MaxResponseBytes caps one plain-HTTP response.
	MaxResponseBytes int `json:"max_response_bytes"`
	// TimeoutMS bounds one plain-HTTP fetch, and a tunnel's idle time.
	TimeoutMS int `json:"timeout_ms"`
	// MaxUpBytesPerEpisode caps what one episode sends upstream: the
	// paths, queries and header values of its requests (no bodies leave).
	MaxUpBytesPerEpisode int `json:"max_up_bytes_per_episode"`
	// MaxRequestsPerEpisode bounds the requests one episode may make;
	// each also pays egress.request_floor_bytes against its byte cap.
	MaxRequestsPerEpisode int `json:"max_requests_per_episode"`
	RequestFloorBytes     int `json:"request_floor_bytes"`
	// MaxConcurrent bounds one episode's requests and tunnels in flight;
	// twice as many connections are kept open.
	MaxConcurrent int `json:"max_concurrent"`
}

// Egress defaults.
const (
	DefaultEgressMaxBytesPerEpisode = 2 << 30
	DefaultEgressMaxResponseBytes   = 512 << 20
	DefaultEgressTimeoutMS          = 300000
	DefaultEgressMaxUpBytes         = 2 << 20
	DefaultEgressMaxRequests        = 20000
	DefaultEgressRequestFloor       = 1 << 10
	DefaultEgressMaxConcurrent      = 64
	EgressCacheDirName              = "egress-cache"
)

// DefaultEgressAllow are the public package registries: the Go module
// proxy and checksum database, npm, PyPI and its files host, crates.io
// (API, index and downloads) and Debian's mirrors.
var DefaultEgressAllow = []string{
	"proxy.golang.org", "sum.golang.org",
	"registry.npmjs.org",
	"pypi.org", "files.pythonhosted.org",
	"crates.io", "index.crates.io", "static.crates.io",
	"deb.debian.org", "security.debian.org",
}

// AllowValue is egress.allow with its default.
func (e Egress) AllowValue() []string {
	if e.Allow == nil {
		return slices.Clone(DefaultEgressAllow)
	}
	return slices.Clone(e.Allow)
}

// CacheDirValue is egress.cache_dir with its default under stateDir.
func (e Egress) CacheDirValue(stateDir string) string {
	if e.CacheDir == "" {
		return filepath.Join(stateDir, EgressCacheDirName)
	}
	return e.CacheDir
}

func checkEgress(c *checker, e *Egress) {
	c.absPath("egress.cache_dir", e.CacheDir, false)
	if len(e.Allow) > policy.MaxEgressHosts {
		c.add("egress.allow", "must list at most %d hosts", policy.MaxEgressHosts)
	}
	for _, h := range e.Allow {
		if !policy.ValidHost(h) {
			c.add("egress.allow", "%q is not a lower-case host name", h)
		}
	}
	for _, n := range e.AllowedNets {
		if _, err := netip.ParsePrefix(n); err != nil {
			c.add("egress.allowed_nets", "%q is not a CIDR prefix", n)
		}
	}
	c.defaulted("egress.max_bytes_per_episode", &e.MaxBytesPerEpisode, DefaultEgressMaxBytesPerEpisode, 1<<20, 1<<50)
	c.defaulted("egress.max_response_bytes", &e.MaxResponseBytes, DefaultEgressMaxResponseBytes, 1<<16, 1<<40)
	c.defaulted("egress.timeout_ms", &e.TimeoutMS, DefaultEgressTimeoutMS, 1000, 3600000)
	c.defaulted("egress.max_up_bytes_per_episode", &e.MaxUpBytesPerEpisode, DefaultEgressMaxUpBytes, 1<<10, 1<<40)
	c.defaulted("egress.max_requests_per_episode", &e.MaxRequestsPerEpisode, DefaultEgressMaxRequests, 1, 1<<30)
	c.defaulted("egress.request_floor_bytes", &e.RequestFloorBytes, DefaultEgressRequestFloor, 1, 1<<20)
	c.defaulted("egress.max_concurrent", &e.MaxConcurrent, DefaultEgressMaxConcurrent, 1, 4096)
}
