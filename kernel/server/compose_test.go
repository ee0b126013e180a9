package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestSpeculationWindowExpiresEffects composes the broker from a
// configuration with speculation_ms and shows the window is its EffectTTL:
// an effect committed inside it meets the commit checks proper (here the
// regime: no controller drives the episode), one committed after it is
// refused as expired before any of them.
func TestSpeculationWindowExpiresEffects(t *testing.T) {
	const window = 400 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, ep, lease := composedWithEpisode(t, ctx, "spec", map[string]any{
		"targets":        map[string]any{"artifact": map[string]any{"reports": map[string]any{"dir": t.TempDir(), "class": 2}}},
		"speculation_ms": window.Milliseconds(),
	})
	ready := func(name string) store.Effect {
		t.Helper()
		target, _ := json.Marshal(map[string]string{"name": name})
		e, err := k.broker.Prepare(ctx, ep.ID, &protocol.WorkerRequest{Action: protocol.WorkerPrepare, Epoch: 1, LeaseID: lease.ID.String(),
			Kind: "artifact", TargetID: "reports", Target: target, PayloadB64: base64.StdEncoding.EncodeToString([]byte(name))})
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		if e.ExpiresAt == nil || e.ExpiresAt.Sub(e.CreatedAt) != window {
			t.Fatalf("effect expiry %v after %v, want the %v window", e.ExpiresAt, e.CreatedAt, window)
		}
		if e, err = k.broker.Evaluate(ctx, e, e.Revision, 1, nil); err != nil {
			t.Fatalf("evaluate: %v", err)
		}
		return e
	}
	fresh := ready("fresh")
	if _, err := k.broker.Commit(ctx, fresh, fresh.Revision, 1); err == nil || !strings.Contains(err.Error(), "regime") {
		t.Fatalf("commit inside the window: %v, want the regime's refusal", err)
	}
	old := ready("old")
	time.Sleep(window + 100*time.Millisecond)
	_, err := k.broker.Commit(ctx, old, old.Revision, 1)
	if protocol.AsWire(err).Code != protocol.CodeStaleAuthority || !strings.Contains(err.Error(), "effect expired") {
		t.Fatalf("commit after the window: %v, want stale_authority: effect expired", err)
	}
}

// TestSlowLoopWithoutVerification: composed with automatic_verification
// off, a class 3 effect still goes to the slow loop (the governor's
// Evaluate: the rule bank and Decide) at evaluate. Here no controller
// drives the episode, so the slow loop refuses it; a broker without it
// would make the effect ready on the lease alone.
func TestSlowLoopWithoutVerification(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, ep, lease := composedWithEpisode(t, ctx, "slowloop", map[string]any{
		"targets":                map[string]any{"artifact": map[string]any{"reports": map[string]any{"dir": t.TempDir(), "class": 3}}},
		"automatic_verification": false,
	})
	e, err := k.broker.Prepare(ctx, ep.ID, &protocol.WorkerRequest{Action: protocol.WorkerPrepare, Epoch: 1, LeaseID: lease.ID.String(),
		Kind: "artifact", TargetID: "reports", Target: json.RawMessage(`{"name":"r"}`), PayloadB64: base64.StdEncoding.EncodeToString([]byte("r"))})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if e.Class != 3 {
		t.Fatalf("class %d", e.Class)
	}
	got, err := k.broker.Evaluate(ctx, e, e.Revision, 1, nil)
	if err == nil || !strings.Contains(err.Error(), "not driven by this controller") {
		t.Fatalf("evaluate without verification: %v (state %s), want the slow loop's refusal", err, got.State)
	}
}

// composedWithEpisode composes a kernel (no episodes driven) from a test
// configuration with more, on its own database, and makes an episode in
// epoch 1 with a lease granting artifacts on "reports" up to class 4, as
// a controller would.
func composedWithEpisode(t *testing.T, ctx context.Context, db string, more map[string]any) (*composition, store.Episode, store.Lease) {
	t.Helper()
	tk := servertest.New(t, db, more)
	st, err := store.Open(ctx, store.Config{URL: tk.Cluster.KernelConnString(db), AdminURL: tk.Cluster.AdminConnString(db), InstanceID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	k, err := compose(tk.Config, st, hclog.NewNullLogger(), Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.broker.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	ep, err := st.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"origin_intent":"x"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := st.GrantLease(ctx, store.LeaseGrant{EpisodeID: ep.ID, Epoch: 1,
		Capabilities: []byte(`{"effects":[{"kind":"artifact","target_id":"reports","max_class":4}]}`), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return k, ep, lease
}
