package episode

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// Spec is what an operator asks for (seed 000's worked example).
type Spec struct {
	OriginIntent string `json:"origin_intent"`
	// Workspace base: the authoritative repository (a host path from
	// trusted configuration, never from a worker) and the exact commit.
	Repo    string `json:"repo"`
	BaseOID string `json:"base_oid"`
	// Policy and the hard envelope; a lease is their intersection under
	// the regulator's ceiling.
	Policy   authority.Spec `json:"policy"`
	Envelope authority.Spec `json:"hard_envelope"`
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
}

var oidPattern = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// reservedEnv are set by the controller; a spec may not choose them.
func reservedEnv(k string) bool { return k == envEpoch || k == envLease }

const (
	envEpoch = "AUTONOMIC_EPOCH"
	envLease = "AUTONOMIC_LEASE_ID"
)

// validate checks a spec and compiles its capabilities.
func (s *Spec) validate() (policy, envelope, repair authority.Capability, err error) {
	switch {
	case s.OriginIntent == "":
		err = fmt.Errorf("origin_intent is empty")
	case !filepath.IsAbs(s.Repo):
		err = fmt.Errorf("repo must be an absolute path")
	case !oidPattern.MatchString(s.BaseOID):
		err = fmt.Errorf("base_oid must be a full lower-case object id")
	case len(s.Argv) == 0:
		err = fmt.Errorf("argv is empty")
	case s.MaxRepairs < 0:
		err = fmt.Errorf("max_repairs is negative")
	case s.LeaseTTL < 0:
		err = fmt.Errorf("lease_ttl is negative")
	}
	for k := range s.Env {
		if reservedEnv(k) {
			err = fmt.Errorf("env %s is set by the kernel", k)
		}
	}
	if err != nil {
		return
	}
	if policy, err = authority.Compile(s.Policy); err != nil {
		return policy, envelope, repair, fmt.Errorf("policy: %w", err)
	}
	if envelope, err = authority.Compile(s.Envelope); err != nil {
		return policy, envelope, repair, fmt.Errorf("hard_envelope: %w", err)
	}
	repair = envelope
	if s.Repair != nil {
		if repair, err = authority.Compile(*s.Repair); err != nil {
			return policy, envelope, repair, fmt.Errorf("repair: %w", err)
		}
	}
	return policy, envelope, repair, nil
}

// leaseDoc is what a lease row stores: the capability in recordable form,
// plus the grants in the shape the broker reads ("effects").
type leaseDoc struct {
	authority.Description
	Effects []brokerGrant `json:"effects"`
}

type brokerGrant struct {
	Kind     string `json:"kind"`
	TargetID string `json:"target_id"`
	MaxClass int    `json:"max_class"`
}

func encodeLease(c authority.Capability) (json.RawMessage, error) {
	d := leaseDoc{Description: c.Describe(), Effects: []brokerGrant{}}
	for _, g := range d.Grants {
		d.Effects = append(d.Effects, brokerGrant{Kind: g.Kind, TargetID: g.Target, MaxClass: int(g.MaxClass)})
	}
	return json.Marshal(d)
}

// decodeLease reads back what encodeLease stored, as a capability. A
// description's CNF allow clauses become one capability per clause,
// intersected, which is the same set.
func decodeLease(raw json.RawMessage) (authority.Capability, error) {
	var d leaseDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return authority.Capability{}, err
	}
	clauses := d.Allow
	if len(clauses) == 0 {
		clauses = [][]string{{}}
	}
	caps := make([]authority.Capability, 0, len(clauses))
	for _, allow := range clauses {
		c, err := authority.Compile(authority.Spec{MaxClass: d.MaxClass, Grants: d.Grants, Allow: allow, Forbid: d.Forbid, Budget: d.Budget})
		if err != nil {
			return authority.Capability{}, err
		}
		caps = append(caps, c)
	}
	return authority.Intersect(caps...), nil
}
