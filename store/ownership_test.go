package store

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
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

// Two processes of one kernel instance (an overlapping restart: the new
// process starts before the old one is gone): the lease names the process,
// so the newer one's acquisition fences the older at once — not when the
// lease would have expired — and the older cannot take it back.
func TestSameInstanceOlderProcessFenced(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	old := e.open("kernel-x", time.Hour)
	f := e.episode(old)
	eff, err := readyEffect(ctx, old, f.ep.ID, 1, f.lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	if own, err := old.AcquireOwnership(ctx, f.ep.ID); err != nil || own.Token != 1 || own.Process == uuid.Nil {
		t.Fatalf("old process: %+v %v", own, err)
	}

	// The newer process of the same instance takes over at once, though
	// the old lease has an hour to run.
	newer := e.open("kernel-x", time.Hour)
	own, err := newer.AcquireOwnership(ctx, f.ep.ID)
	if err != nil || own.Token != 2 || own.InstanceID != "kernel-x" {
		t.Fatalf("newer process: %+v %v", own, err)
	}

	// The older process is fenced on every mutation and cannot renew.
	_, err = old.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, allow)
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = old.GrantLease(ctx, LeaseGrant{EpisodeID: f.ep.ID, Epoch: 1, Capabilities: []byte(`{}`), TTL: time.Minute})
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = old.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1, Reason: "old"})
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = old.AcquireOwnership(ctx, f.ep.ID)
	wantCode(t, err, protocol.CodeStaleAuthority)
	if err := old.ReleaseOwnership(ctx, f.ep.ID); code(err) != protocol.CodeStaleAuthority {
		t.Fatalf("the old process released the newer's lease: %v", err)
	}

	// The newer process drives the episode; the ledger says who took it.
	if _, err := newer.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, allow); err != nil {
		t.Fatal(err)
	}
	if k := kinds(t, newer, f.ep.ID); !strings.Contains(k, "ownership_taken") {
		t.Fatalf("no ownership_taken in %s", k)
	}
	mustVerify(t, newer, f.ep.ID)
}
