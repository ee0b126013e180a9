package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	agent "github.com/autonomic-kernel/autonomic/agents"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
)

// agentRun is what `autonomic run` knows when it builds the spec.
type agentRun struct {
	Agent, Task, Repo, Base, Ref, TargetID string
	Target                                 config.GitCommitTarget
	Key                                    *operatorKey
	// Model overrides the profile's model (--model); Cfg is the kernel's
	// configuration (its providers, egress ceiling and repair count).
	Model string
	Cfg   *config.Config
	// Lifts are the default rules the signed policy (and the envelope)
	// lift (--lift), by authority name.
	Lifts []string
	// Create: Ref is a new branch the landing creates on Base.
	Create bool
}

// The default policy's inference budget for one run: generous for one
// task, small enough that a runaway loop stops on its own.
const (
	runMaxTokens   = 4_000_000
	runMaxSpendUSD = 20
)

// agentSpec builds the episode spec of one agent run: the agent profile's
// rootfs, seccomp profile, wall time and rendered argv; the configured
// provider that speaks the profile's wire API; a default policy signed
// with the operator's key — git_commit on the target within its own
// allowed and forbidden paths, the run's model and budget, the public
// package registries for egress — and the harvest onto the run's ref.
func agentSpec(r agentRun) ([]byte, *agent.Profile, string, error) {
	p, err := agent.Load(r.Agent)
	if err != nil {
		return nil, nil, "", err
	}
	provider, prov, err := providerFor(r.Cfg, p.WireAPI)
	if err != nil {
		return nil, nil, "", fmt.Errorf("--agent %s: %w", r.Agent, err)
	}
	model := r.Model
	if model == "" {
		// The profile's model when the provider serves it (a slug the
		// agent knows), else the provider's first.
		if model = p.Model; !slices.Contains(prov.Models, model) {
			model = prov.Models[0]
		}
	}
	if !slices.Contains(prov.Models, model) {
		return nil, nil, "", fmt.Errorf("--model %s: provider %s serves only %s", model, provider, strings.Join(prov.Models, ", "))
	}
	class := authority.Class(3)
	if r.Target.Class > 0 {
		class = authority.Class(r.Target.Class)
	}
	allow := r.Target.AllowedPaths
	if len(allow) == 0 {
		allow = []string{"**"}
	}
	cap := authority.Spec{MaxClass: class, Grants: []authority.Grant{{Target: r.TargetID, Kind: "git_commit", MaxClass: class, Refs: []string{r.Ref}}},
		Allow: allow, Forbid: append(slices.Clone(r.Target.ForbiddenPaths), ".git/**"),
		Budget: authority.Budget{BytesPerEffect: 4 << 20, BytesTotal: 64 << 20, EffectsPerMinute: 30}, Lift: r.Lifts}
	doc := policy.Document{Schema: policy.Schema, ID: "autonomic-run", Version: 1, Capability: cap,
		Semantic:  policy.Semantic{MaxRisk: 0.5},
		Inference: &policy.Inference{Models: []string{model}, MaxTokens: runMaxTokens, MaxSpendMicroUSD: runMaxSpendUSD * 1_000_000}}
	// The public registries, bridged into the domain with the tools'
	// variables (agent.WithEgress). The CLI's own hosts (the profile's
	// own_hosts) go into NO_PROXY: its background calls fail inside the
	// domain as they do without egress, rather than reaching the proxy as
	// refusals, which are drift on the fast loop (measured with Codex
	// 0.171.0 before own_hosts: four refused background calls made the
	// episode unstable and the class 3 harvest was denied).
	var opts []agent.RenderOption
	if hosts := egressDefault(r.Cfg); len(hosts) > 0 {
		doc.Egress = &policy.Egress{Allow: hosts}
		opts = append(opts, agent.WithEgress())
	}
	argv, err := p.Render(r.Task, model, opts...)
	if err != nil {
		return nil, nil, "", err
	}
	signed, err := policy.Sign(r.Key.priv, r.Key.keyID, doc)
	if err != nil {
		return nil, nil, "", err
	}
	wall := p.WallTime()
	es := episode.Spec{
		OriginIntent: r.Task, Repo: r.Target.Repo, BaseOID: r.Base, Policy: signed, Envelope: cap,
		RequestedCeiling: class, MaxRepairs: r.Cfg.MaxRepairsValue(), LeaseTTL: wall + 10*time.Minute, Argv: argv,
		Harvest: &episode.HarvestSpec{TargetID: r.TargetID, Ref: r.Ref, Create: r.Create}, WallTime: wall,
		Rootfs: p.Rootfs, Seccomp: p.Seccomp, Inference: provider,
	}
	// The target's own environment and setup (its trusted configuration):
	// the agent CLIs are layered onto every environment.
	if r.Target.Environment != "" {
		es.Rootfs = r.Target.Environment
	}
	if len(r.Target.Setup) > 0 {
		es.Setup = &episode.SetupSpec{Argv: r.Target.Setup, Lockfiles: r.Target.SetupLockfiles}
	}
	spec, err := json.Marshal(es)
	return spec, p, provider, err
}

// providerFor is the configured provider that speaks wire (the first by
// name when several do).
func providerFor(cfg *config.Config, wire string) (string, config.Provider, error) {
	names := make([]string, 0, len(cfg.Inference.Providers))
	for n, p := range cfg.Inference.Providers {
		if p.WireAPI == wire {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", config.Provider{}, fmt.Errorf("no provider in inference.providers speaks its wire API %q", wire)
	}
	sort.Strings(names)
	return names[0], cfg.Inference.Providers[names[0]], nil
}

// egressDefault is the run's egress grant: the public package registries
// the operator's ceiling also lists.
func egressDefault(cfg *config.Config) []string {
	ceiling := cfg.Egress.AllowValue()
	var out []string
	for _, h := range config.DefaultEgressAllow {
		if slices.Contains(ceiling, h) {
			out = append(out, h)
		}
	}
	return out
}

// defaultRef is where a run's change lands without --ref: the target's
// refs/heads/agent/<agent> when it allows that, else its only allowed ref.
func defaultRef(t config.GitCommitTarget, agentName string) (string, error) {
	if len(t.AllowedRefPrefixes) > 0 {
		// One branch per run: its own name, so no two runs share a ref.
		return t.AllowedRefPrefixes[0] + agentName + "/" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12], nil
	}
	if r := "refs/heads/agent/" + agentName; slices.Contains(t.AllowedRefs, r) {
		return r, nil
	}
	if len(t.AllowedRefs) == 1 {
		return t.AllowedRefs[0], nil
	}
	return "", fmt.Errorf("name the ref with --ref: the target allows %s", strings.Join(t.AllowedRefs, ", "))
}
