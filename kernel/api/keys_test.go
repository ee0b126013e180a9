package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"os"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestPolicyKeyRegistration: a policy key registered through the API is
// one every later verification accepts, persisted for the next start; an
// id already held is never replaced; a malformed key is invalid_field; and
// a member of the operator group — who may run and approve, but whose
// keys define what episodes may do only when the kernel's account or root
// registers them — is refused, changing nothing.
func TestPolicyKeyRegistration(t *testing.T) {
	if os.Geteuid() != 0 {
		privileged.Skip(t, "switching the peer's uid needs root")
	}
	const nobody, nogroup = 65534, 65534
	state := t.TempDir()
	live, err := policy.OpenLiveKeys(state, policy.Keys{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, Access{KernelUID: 12345, OperatorGID: nogroup}, func(_ *store.Postgres, cfg *Config) { cfg.Keys = live })
	if err := os.Chown(e.sock, 0, nogroup); err != nil {
		t.Fatal(err)
	}
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	b64 := base64.StdEncoding.EncodeToString(pub)
	// An operator-group member is refused.
	cmdEnv := os.Getenv(helperKeyEnv)
	os.Setenv(helperKeyEnv, b64)
	got := asPeer(t, e.sock, nobody, nogroup)
	os.Setenv(helperKeyEnv, cmdEnv)
	if got != string(protocol.CodePeerRefused) || len(live.Keys()) != 0 {
		t.Fatalf("operator-group member registering a key: %q, keys %v", got, live.Keys())
	}
	// Root registers it: verifications see it at once, and the next start.
	ctx := ctxT(t)
	if err := e.client.AddKey(ctx, "ops-2", b64); err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(live.Keys()["ops-2"]) {
		t.Fatal("the registered key is not in the live set")
	}
	if again, err := policy.OpenLiveKeys(state, policy.Keys{}); err != nil || !pub.Equal(again.Keys()["ops-2"]) {
		t.Fatalf("after a restart: %v", err)
	}
	if listed, err := e.client.PolicyKeys(ctx); err != nil || listed["ops-2"] != b64 {
		t.Fatalf("list: %v %v", listed, err)
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if err := e.client.AddKey(ctx, "ops-2", base64.StdEncoding.EncodeToString(other)); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Errorf("replacing a key: %v", err)
	}
	if err := e.client.AddKey(ctx, "ops-3", "not a key"); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Errorf("a malformed key: %v", err)
	}
	if !pub.Equal(live.Keys()["ops-2"]) || len(live.Keys()) != 1 {
		t.Errorf("refusals changed the set: %v", live.Keys())
	}
}
