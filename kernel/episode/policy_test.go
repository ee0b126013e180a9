package episode_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestStartRefusesUnsignedPolicies: an unsigned, tampered, wrongly signed
// or unknown-key policy is refused with its typed error and catalogue
// code before anything exists (no episode row, no workspace); a spec
// error is invalid_field; the rig's signed policy starts.
func TestStartRefusesUnsignedPolicies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newRig(t, ctx, "episode_policy")
	grant := grantSpec()
	unsigned, _ := json.Marshal(map[string]any{"policy": policy.Document{Schema: policy.Schema, ID: "fixture", Version: 1,
		Capability: grant, Semantic: policy.Semantic{MaxRisk: 0.5}}})
	var env policy.Signed
	if err := json.Unmarshal(signPolicy(grant), &env); err != nil {
		t.Fatal(err)
	}
	wider := grant
	wider.MaxClass = 4
	widerDoc, _ := json.Marshal(policy.Document{Schema: policy.Schema, ID: "fixture", Version: 1, Capability: wider,
		Semantic: policy.Semantic{MaxRisk: 0.5}})
	tampered, _ := json.Marshal(policy.Signed{Policy: widerDoc, KeyID: env.KeyID, Signature: env.Signature})
	_, other, _ := ed25519.GenerateKey(nil)
	wrongKey, _ := policy.Sign(other, policyKeyID, policy.Document{Schema: policy.Schema, ID: "fixture", Version: 1,
		Capability: grant, Semantic: policy.Semantic{MaxRisk: 0.5}})
	unknownKey, _ := policy.Sign(policyKey(), "someone-else", policy.Document{Schema: policy.Schema, ID: "fixture", Version: 1,
		Capability: grant, Semantic: policy.Semantic{MaxRisk: 0.5}})
	rawSpec, _ := json.Marshal(grant)

	for name, c := range map[string]struct {
		policy  json.RawMessage
		refusal policy.Refusal
		code    protocol.Code
	}{
		"unsigned":        {unsigned, policy.ErrUnsigned, protocol.CodeForbidden},
		"bare capability": {rawSpec, policy.ErrMalformed, protocol.CodeUnknownField},
		"tampered":        {tampered, policy.ErrBadSignature, protocol.CodeForbidden},
		"wrong key":       {wrongKey, policy.ErrBadSignature, protocol.CodeForbidden},
		"unknown key":     {unknownKey, policy.ErrUnknownKey, protocol.CodeForbidden},
		"absent":          {nil, policy.ErrMalformed, protocol.CodeMalformedJSON},
	} {
		spec := r.spec(nil)
		spec.Policy = c.policy
		_, err := r.k.Start(ctx, spec)
		var pe *policy.Error
		if !errors.As(err, &pe) || !errors.Is(err, c.refusal) || protocol.AsWire(err).Code != c.code {
			t.Errorf("%s: %v (code %s), want %s / %s", name, err, protocol.AsWire(err).Code, c.refusal, c.code)
		}
	}
	bad := r.spec(nil)
	bad.BaseOID = "main"
	if _, err := r.k.Start(ctx, bad); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Errorf("bad base_oid: %v, want invalid_field", err)
	}
	if eps, err := r.st.ListEpisodes(ctx, 10); err != nil || len(eps) != 0 {
		t.Fatalf("refused starts changed the store: %d episodes, %v", len(eps), err)
	}
	// A well-formed base that is not a commit of the repository is found
	// only when the workspace is prepared: still the operator's mistake.
	missing := r.spec(nil)
	missing.BaseOID = strings.Repeat("0", 40)
	if _, err := r.k.Start(ctx, missing); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Errorf("base_oid not in the repository: %v, want invalid_field", err)
	}
	e, err := r.k.Start(ctx, r.spec(nil))
	if err != nil {
		t.Fatalf("signed policy refused: %v", err)
	}
	if st := e.Status(); st.Lease.MaxClass() != authority.Class(3) {
		t.Fatalf("lease %+v", st.Lease.Describe())
	}
	if rec, err := r.st.Episode(ctx, e.ID()); err != nil || rec.PolicyVersion != 1 {
		t.Fatalf("episode row: %+v %v", rec, err)
	}
	if err := e.End(ctx, episode.Aborted, "test done"); err != nil {
		t.Fatal(err)
	}
}
