package episode

import (
	"encoding/json"
	"fmt"
	"github.com/autonomic-kernel/autonomic/broker"
	"path/filepath"
	"regexp"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// Spec is what an operator asks for (seed 000's worked example).
type Spec struct {
	OriginIntent string `json:"origin_intent"`
	// Workspace base: the authoritative repository (a host path from
	// trusted configuration, never from a worker) and the exact commit.
	Repo    string `json:"repo"`
	BaseOID string `json:"base_oid"`
	// Policy is a signed policy envelope (kernel/policy.Signed), admitted
	// only if it verifies against Config.PolicyKeys. The hard envelope is
	// the operator's own cap; a lease is the intersection of the policy's
	// capability and the envelope under the regulator's ceiling.
	Policy   json.RawMessage `json:"policy"`
	Envelope authority.Spec  `json:"hard_envelope"`
	// Repair is intersected into every repair lease, so a repaired episode
	// holds at most what it held before and no more than this.
	Repair *authority.Spec `json:"repair,omitempty"`
	// RequestedCeiling caps the lease's class below what policy and
	// envelope allow.
	RequestedCeiling authority.Class          `json:"requested_ceiling"`
	Limits           *protocol.ResourceLimits `json:"limits,omitempty"`
	Argv             []string                 `json:"argv"`
	Env              map[string]string        `json:"env,omitempty"`
	Cwd              string                   `json:"cwd,omitempty"`
	MaxRepairs       int                      `json:"max_repairs"`
	LeaseTTL         time.Duration            `json:"lease_ttl"`
	// Harvest, when set, ends the episode by itself when its worker exits:
	// the workspace's change is proposed as a git_commit on the agent's
	// behalf (harvest.go). Absent, a worker's exit leaves the episode
	// running until an operator ends it, as before.
	Harvest *HarvestSpec `json:"harvest,omitempty"`
	// WallTime bounds the episode's life from its start (0: Config's
	// WallTime; never above Config's MaxWallTime). When it is reached the
	// domain is destroyed and the episode ends aborted, outcome wall_time.
	WallTime time.Duration `json:"wall_time,omitempty"`
	// Rootfs names the launcher's rootfs the worker runs on (its rootfses
	// table, e.g. "agents"); "" is the launcher's default.
	Rootfs string `json:"rootfs,omitempty"`
	// Seccomp is the worker's profile, "worker" (the default) or "agent"
	// (loopback TCP for an agent's bridge; see seccomp/profiles).
	Seccomp string `json:"seccomp,omitempty"`
	// Inference names a provider of the kernel's configuration
	// (inference.providers): the episode gets its own relay (services.go),
	// budgeted by the signed policy's inference section. "": no relay.
	Inference string `json:"inference,omitempty"`
	// Setup, when set, prepares the workspace before the worker starts
	// (setup.go): its command's result is a layer every episode of the
	// same key starts from, and verification runs on it.
	Setup *SetupSpec `json:"setup,omitempty"`
}

// SetupSpec is a target's setup phase (config: a git_commit target's setup
// and setup_lockfiles).
type SetupSpec struct {
	// Argv runs in /workspace as the worker, on the spec's rootfs, under
	// its seccomp profile, with the episode's egress proxy.
	Argv []string `json:"argv"`
	// Lockfiles are the repository paths whose blobs at the base key the
	// layer; empty: DefaultLockfiles.
	Lockfiles []string `json:"lockfiles,omitempty"`
}

// HarvestSpec names where a harvested change goes: a git_commit target of
// the broker's trusted configuration and one of its allowed refs. The
// change is made against the spec's base_oid.
type HarvestSpec struct {
	TargetID string `json:"target_id"`
	Ref      string `json:"ref"`
	// WorkerCommits lets the worker propose git_commit on the harvest's
	// target itself (the operator asked for it). Without it the harvest
	// is the only way the episode's change reaches the target: the
	// worker's socket refuses that effect (broker.Binding.KernelOnly).
	WorkerCommits bool `json:"worker_commits,omitempty"`
	// Create: Ref is a new branch (under the target's allowed prefix) the
	// landing creates on the base; it must not exist when the change lands.
	Create bool `json:"create,omitempty"`
}

// kernelOnly are the effects the episode's worker may not propose.
func (s *Spec) kernelOnly() []broker.KindTarget {
	if s.Harvest == nil || s.Harvest.WorkerCommits {
		return nil
	}
	return []broker.KindTarget{{Kind: "git_commit", TargetID: s.Harvest.TargetID}}
}

var oidPattern = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// refPattern is a plain full ref name (the target's allow list decides),
// short enough that a landed Outcome fits the store's 256-byte reason.
var refPattern = regexp.MustCompile(`^refs/[A-Za-z0-9._/-]{1,91}$`)

// reservedEnv are set by the controller; a spec may not choose them.
func reservedEnv(k string) bool { return k == envEpoch || k == envLease }

const (
	envEpoch = "AUTONOMIC_EPOCH"
	envLease = "AUTONOMIC_LEASE_ID"
)

// validate checks a spec, verifies its signed policy against keys and
// compiles its capabilities. A refused policy is a *policy.Error (its
// catalogue code is forbidden for a signature problem, invalid_field or a
// decode code for content); every other problem is invalid_field, so an
// operator's mistake never reads as a kernel fault.
func (s *Spec) validate(keys policy.Keys) (pol *policy.Policy, envelope, repair authority.Capability, err error) {
	invalid := func(format string, args ...any) error {
		return protocol.Errorf(protocol.CodeInvalidField, format, args...)
	}
	switch {
	case s.OriginIntent == "":
		err = invalid("origin_intent is empty")
	case !filepath.IsAbs(s.Repo):
		err = invalid("repo must be an absolute path")
	case !oidPattern.MatchString(s.BaseOID):
		err = invalid("base_oid must be a full lower-case object id")
	case len(s.Argv) == 0:
		err = invalid("argv is empty")
	case s.MaxRepairs < 0:
		err = invalid("max_repairs is negative")
	case s.LeaseTTL < 0:
		err = invalid("lease_ttl is negative")
	case s.RequestedCeiling > authority.MaxClass:
		err = invalid("requested_ceiling is not a class")
	case s.WallTime < 0:
		err = invalid("wall_time is negative")
	case s.Harvest != nil && (!protocol.ValidTargetID(s.Harvest.TargetID) || !refPattern.MatchString(s.Harvest.Ref)):
		err = invalid("harvest needs a target_id and a full ref name (refs/...)")
	case s.Setup != nil:
		err = s.Setup.validate()
	}
	for k := range s.Env {
		if reservedEnv(k) {
			err = invalid("env %s is set by the kernel", k)
		}
	}
	if err != nil {
		return
	}
	// Signature first: nothing of an unauthenticated policy is used.
	if pol, err = policy.Verify(keys, s.Policy); err != nil {
		return nil, envelope, repair, fmt.Errorf("policy: %w", err)
	}
	if envelope, err = authority.Compile(s.Envelope); err != nil {
		return nil, envelope, repair, invalid("hard_envelope: %w", err)
	}
	repair = envelope
	if s.Repair != nil {
		if repair, err = authority.Compile(*s.Repair); err != nil {
			return nil, envelope, repair, invalid("repair: %w", err)
		}
	}
	return pol, envelope, repair, nil
}

// encodeLease and decodeLease: the lease row's document (kernel/authority).
func encodeLease(c authority.Capability) (json.RawMessage, error) { return authority.EncodeLease(c) }

func decodeLease(raw json.RawMessage) (authority.Capability, error) {
	return authority.DecodeLease(raw)
}
