package egress

import (
	"slices"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/google/uuid"
)

// TestConfigFor: no egress block, no proxy; the allow list is the
// intersection with the operator's ceiling; the smaller cap wins.
func TestConfigFor(t *testing.T) {
	c := config.Egress{MaxBytesPerEpisode: 1 << 30, MaxResponseBytes: 1 << 20, TimeoutMS: 5000, AllowedNets: []string{"203.0.113.80/32"}}
	ep := uuid.New()
	if _, ok, err := ConfigFor(c, &policy.Policy{}, ep, nil, nil); ok || err != nil {
		t.Fatalf("a policy without egress: ok %v, %v", ok, err)
	}
	p := &policy.Policy{Document: policy.Document{Egress: &policy.Egress{
		Allow: []string{"proxy.golang.org", "git.example.com"}, MaxBytes: 1 << 20}}}
	cfg, ok, err := ConfigFor(c, p, ep, nil, nil)
	if !ok || err != nil || !slices.Equal(cfg.Allow, []string{"proxy.golang.org"}) || cfg.MaxBytes != 1<<20 ||
		cfg.EpisodeID != ep || len(cfg.AllowedNets) != 1 || cfg.Timeout.Milliseconds() != 5000 {
		t.Fatalf("%v %v %+v", ok, err, cfg)
	}
	p.Egress.MaxBytes = 0
	if cfg, _, _ := ConfigFor(c, p, ep, nil, nil); cfg.MaxBytes != 1<<30 {
		t.Fatalf("operator's cap: %d", cfg.MaxBytes)
	}
	c.Allow = []string{} // the operator allows nothing
	if cfg, _, _ := ConfigFor(c, p, ep, nil, nil); len(cfg.Allow) != 0 {
		t.Fatalf("ceiling ignored: %v", cfg.Allow)
	}
}
