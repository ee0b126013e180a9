package broker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestCommitOwnershipInItsTransaction: a worker's commit checks, in
// commit_intent's own transaction (store.EnterCommitInEpisode), what the
// separate ownership read checked before it, with the same answers in the
// same order — the request's epoch first, then the effect's episode, then
// its revision and its approval — and a refused commit changes nothing.
func TestCommitOwnershipInItsTransaction(t *testing.T) {
	e, pub := artifactEnv(t)
	ctx := ctxT(t)
	p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "mine.bin"}, []byte("mine"))))
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeIllegalTransition)
	mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeApprovalRequired)
	ev := byEffectReq(e, protocol.WorkerEvaluate, p)
	ev.Approval = e.approve(p.ID)
	if r := mustOK(t, e.do(ev)); r.State != string(store.Ready) {
		t.Fatal(r.State)
	}
	// Another episode this kernel owns, at the same epoch as the effect's.
	ep2, err := e.store.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.AcquireOwnership(ctx, ep2.ID); err != nil {
		t.Fatal(err)
	}
	if ep2.Epoch != e.epoch() {
		t.Fatalf("epochs %d and %d: the case needs them equal", ep2.Epoch, e.epoch())
	}
	events := func() int {
		n := 0
		for _, ep := range []store.Episode{e.ep, ep2} {
			es, err := e.store.Events(ctx, ep.ID)
			if err != nil {
				t.Fatal(err)
			}
			n += len(es)
		}
		return n
	}
	before := events()
	commitAs := func(ep store.Episode, epoch int64, revision int) *protocol.WorkerResponse {
		return e.broker.Handle(ctx, ep.ID, &protocol.WorkerRequest{Protocol: 1, RequestID: "c", Epoch: epoch,
			Action: protocol.WorkerCommit, EffectID: p.ID, Revision: revision})
	}
	// The other episode's worker: its epoch is checked first, then the
	// effect is not its own.
	wantErr(t, commitAs(ep2, ep2.Epoch+1, p.Revision), protocol.CodeStaleRequestEpoch)
	wantErr(t, commitAs(ep2, ep2.Epoch, p.Revision), protocol.CodeNotFound)
	// The effect's own worker, with a stale epoch or revision.
	wantErr(t, commitAs(e.ep, p.Epoch+1, p.Revision), protocol.CodeStaleRequestEpoch)
	wantErr(t, commitAs(e.ep, p.Epoch, p.Revision+1), protocol.CodeStaleAuthority)
	if eff, err := e.store.Effect(ctx, mustUUID(p.ID)); err != nil || eff.State != store.Ready {
		t.Fatalf("refused commits moved the effect: %v %v", eff.State, err)
	}
	if n := events(); n != before {
		t.Fatalf("refused commits wrote %d ledger events", n-before)
	}
	if _, err := os.Stat(filepath.Join(pub, "mine.bin")); !os.IsNotExist(err) {
		t.Fatal("a refused commit published")
	}
	if c := mustOK(t, commitAs(e.ep, p.Epoch, p.Revision)); c.State != string(store.Committed) {
		t.Fatal(c.State)
	}
}

// TestCommitPayloadUnreadable: a payload the store cannot read at commit
// (here a directory where its file was) is refused as internal, as before
// the read moved under commit_intent's locks, not as an unavailable
// database, and the effect stays ready.
func TestCommitPayloadUnreadable(t *testing.T) {
	e, pub := artifactEnv(t)
	p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "gone.bin"}, []byte("gone"))))
	ev := byEffectReq(e, protocol.WorkerEvaluate, p)
	ev.Approval = e.approve(p.ID)
	mustOK(t, e.do(ev))
	path, err := e.payloads.path(p.PayloadDigest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeInternal)
	if eff, err := e.store.Effect(ctxT(t), mustUUID(p.ID)); err != nil || eff.State != store.Ready {
		t.Fatalf("effect %v %v", eff.State, err)
	}
	if _, err := os.Stat(filepath.Join(pub, "gone.bin")); !os.IsNotExist(err) {
		t.Fatal("published")
	}
}
