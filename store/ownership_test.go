package store

import (
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Two kernel instances on one database: only the owner drives an episode;
// the other takes over once the owner's lease lapses (by the database's
// clock), after which the first instance's writes are refused.
func TestTwoKernelInstancesOwnership(t *testing.T) {
	e := newEnv(t)
	// Long enough that a loaded CI machine finishes each step well
	// inside it; a renewal precedes every step that relies on it.
	const ttl = 2 * time.Second
	a, b := e.open("kernel-a", ttl), e.open("kernel-b", ttl)
	ctx := ctxT(t)
	f := e.episode(a)
	eff, err := readyEffect(ctx, a, f.ep.ID, 1, f.lease.ID)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := a.AcquireOwnership(ctx, f.ep.ID); err != nil {
		t.Fatal(err)
	}
	_, err = b.AcquireOwnership(ctx, f.ep.ID)
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = b.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1, Reason: "b"})
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = b.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, allow)
	wantCode(t, err, protocol.CodeStaleAuthority)
	// Reads are not ownership-gated.
	if _, err := b.Effect(ctx, eff.ID); err != nil {
		t.Fatal(err)
	}

	own, err := a.AcquireOwnership(ctx, f.ep.ID) // renewal
	if err != nil || own.Token != 1 || own.InstanceID != "kernel-a" {
		t.Fatalf("renewal: %+v %v", own, err)
	}
	time.Sleep(own.ExpiresAt.Sub(time.Now()) + 100*time.Millisecond)

	// Lapsed: even with nobody else holding it, a's writes stop.
	_, err = a.GrantLease(ctx, LeaseGrant{EpisodeID: f.ep.ID, Epoch: 1, TTL: time.Minute})
	wantCode(t, err, protocol.CodeStaleAuthority)

	// Two instances racing for the lapsed lease: exactly one wins.
	var wg sync.WaitGroup
	var errA, errB error
	var ownB Ownership
	wg.Add(2)
	go func() { defer wg.Done(); _, errA = a.AcquireOwnership(ctx, f.ep.ID) }()
	go func() { defer wg.Done(); ownB, errB = b.AcquireOwnership(ctx, f.ep.ID) }()
	wg.Wait()
	if (errA == nil) == (errB == nil) {
		t.Fatalf("both or neither acquired: a=%v b=%v", errA, errB)
	}
	if errA == nil {
		// Let b win for the rest of the test: a releases at once.
		if err := a.ReleaseOwnership(ctx, f.ep.ID); err != nil {
			t.Fatal(err)
		}
		if ownB, err = b.AcquireOwnership(ctx, f.ep.ID); err != nil {
			t.Fatal(err)
		}
	}
	loser := a
	if ownB.InstanceID != "kernel-b" || ownB.Token < 2 {
		t.Fatalf("takeover: %+v", ownB)
	}

	// The deposed instance is fenced everywhere.
	_, err = loser.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, allow)
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = loser.AcquireOwnership(ctx, f.ep.ID)
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = loser.Transition(ctx, Transition{EffectID: eff.ID, Revision: 1, Epoch: 1, To: Aborted})
	wantCode(t, err, protocol.CodeStaleAuthority)

	// The new owner drives the episode.
	if _, err := b.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, allow); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1, Reason: "takeover"}); err != nil {
		t.Fatal(err)
	}
	// Released ownership can be taken at once, without waiting for TTL.
	if err := b.ReleaseOwnership(ctx, f.ep.ID); err != nil {
		t.Fatal(err)
	}
	ownA, err := a.AcquireOwnership(ctx, f.ep.ID)
	if err != nil || ownA.Token <= ownB.Token {
		t.Fatalf("re-acquire after release: %+v %v", ownA, err)
	}
	mustVerify(t, a, f.ep.ID)
}
