package egress

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/google/uuid"
)

// ConfigFor is one episode's proxy configuration from the operator's
// egress section and the episode's signed policy: the allow list is the
// policy's grant intersected with the operator's ceiling (no grant: none,
// and ok is false — serve no proxy at all), the byte cap the smaller of
// the policy's and the operator's. The caller adds OnRefused.
func ConfigFor(c config.Egress, p *policy.Policy, episode uuid.UUID, ledger Ledger, cache *Cache) (cfg Config, ok bool, err error) {
	if p == nil || p.Egress == nil {
		return Config{}, false, nil
	}
	allow := Allowlist(p, c.AllowValue())
	maxBytes := int64(c.MaxBytesPerEpisode)
	if maxBytes <= 0 {
		maxBytes = config.DefaultEgressMaxBytesPerEpisode
	}
	if p.Egress.MaxBytes > 0 && p.Egress.MaxBytes < maxBytes {
		maxBytes = p.Egress.MaxBytes
	}
	var nets []netip.Prefix
	for _, n := range c.AllowedNets {
		pfx, err := netip.ParsePrefix(n)
		if err != nil {
			return Config{}, false, fmt.Errorf("egress.allowed_nets: %q is not a CIDR prefix", n)
		}
		nets = append(nets, pfx)
	}
	cfg = Config{
		EpisodeID: episode, Allow: allow, MaxBytes: maxBytes,
		MaxResponseBytes: int64(c.MaxResponseBytes), Timeout: time.Duration(c.TimeoutMS) * time.Millisecond,
		Ledger: ledger, Cache: cache, AllowedNets: nets,
		MaxUpBytes: int64(c.MaxUpBytesPerEpisode), MaxRequests: int64(c.MaxRequestsPerEpisode),
		RequestFloor: int64(c.RequestFloorBytes), MaxConcurrent: c.MaxConcurrent,
	}
	return cfg, true, nil
}
