package broker

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestClass4HumanHorizon is the class4_human_horizon gate: no commit
// without the exact signature; a signature never carries over to a
// re-proposed payload, another revision, epoch, digest or key.
func TestClass4HumanHorizon(t *testing.T) {
	e, pub := artifactEnv(t)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	prep := func(name, body string) *protocol.EffectResult {
		p := mustOK(t, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": name}, []byte(body))))
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p)))
		return p
	}
	evaluate := func(p *protocol.EffectResult, a *protocol.Approval) *protocol.WorkerResponse {
		req := byEffectReq(e, protocol.WorkerEvaluate, p)
		req.Approval = a
		return e.do(req)
	}
	sign := func(key ed25519.PrivateKey, keyID string, doc protocol.ApprovalDocument) *protocol.Approval {
		a, err := SignApproval(key, keyID, doc)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	t.Run("no approval, no commit", func(t *testing.T) {
		p := prep("a.bin", "a")
		wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeApprovalRequired)
	})

	t.Run("wrong approvals", func(t *testing.T) {
		p := prep("b.bin", "b")
		eff, _ := e.store.Effect(ctxT(t), mustUUID(p.ID))
		good := ApprovalFor(eff, "allow")
		mutate := map[string]func(d *protocol.ApprovalDocument){
			"revision": func(d *protocol.ApprovalDocument) { d.EffectRevision++ },
			"epoch":    func(d *protocol.ApprovalDocument) { d.Epoch++ },
			"digest":   func(d *protocol.ApprovalDocument) { d.PayloadDigest = Digest([]byte("other")) },
			"episode":  func(d *protocol.ApprovalDocument) { d.EpisodeID = e.lease.ID.String() },
			"effect":   func(d *protocol.ApprovalDocument) { d.EffectID = e.lease.ID.String() },
		}
		for name, m := range mutate {
			doc := good
			m(&doc)
			wantErr(t, evaluate(p, sign(e.key, "operator", doc)), protocol.CodeApprovalInvalid)
			_ = name
		}
		wantErr(t, evaluate(p, sign(stranger, "operator", good)), protocol.CodeApprovalInvalid)
		wantErr(t, evaluate(p, sign(e.key, "someone", good)), protocol.CodeApprovalInvalid)
		forged := sign(e.key, "operator", good)
		forged.Document.Decision = "allow"
		forged.Signature = sign(e.key, "operator", protocol.ApprovalDocument{EffectID: good.EffectID, EffectRevision: 1,
			EpisodeID: good.EpisodeID, Epoch: good.Epoch, PayloadDigest: good.PayloadDigest, Decision: "deny"}).Signature
		wantErr(t, evaluate(p, forged), protocol.CodeApprovalInvalid)
		// A signature over the bare document, without the context line,
		// is not an approval either.
		msg, _ := ApprovalMessage(good)
		bare := sign(e.key, "operator", good)
		bare.Signature = b64(ed25519.Sign(e.key, msg[len(protocol.ApprovalContext):]))
		wantErr(t, evaluate(p, bare), protocol.CodeApprovalInvalid)
		wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeApprovalRequired)
		// The exact one works.
		mustOK(t, evaluate(p, sign(e.key, "operator", good)))
		if c := mustOK(t, e.do(byEffectReq(e, protocol.WorkerCommit, p))); c.State != "committed" {
			t.Fatal(c.State)
		}
	})

	t.Run("a denial is final for the revision", func(t *testing.T) {
		p := prep("c.bin", "c")
		eff, _ := e.store.Effect(ctxT(t), mustUUID(p.ID))
		wantErr(t, evaluate(p, sign(e.key, "operator", ApprovalFor(eff, "deny"))), protocol.CodeForbidden)
		wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeApprovalRequired)
	})

	t.Run("replay on a re-proposed payload", func(t *testing.T) {
		p := prep("d.bin", "original")
		old := e.approve(p.ID)
		// The worker re-proposes other bytes under the same effect: a new
		// revision, and the old signature does not apply to it.
		re := prepareReq(e, "artifact", "releases", map[string]string{"name": "d.bin"}, []byte("swapped"))
		re.EffectID, re.Revision = p.ID, p.Revision
		p2 := mustOK(t, e.do(re))
		if p2.Revision != p.Revision+1 || p2.PayloadDigest == p.PayloadDigest {
			t.Fatalf("re-proposal: %+v", p2)
		}
		mustOK(t, e.do(byEffectReq(e, protocol.WorkerEvaluate, p2)))
		wantErr(t, evaluate(p2, old), protocol.CodeApprovalInvalid)
		wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p2)), protocol.CodeApprovalRequired)
		// And the old revision cannot be committed any more.
		wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeStaleAuthority)

		// The same payload re-proposed under a new epoch is a new effect:
		// its approval from the old epoch does not carry over.
		p3 := prep("e.bin", "epoch one")
		a3 := e.approve(p3.ID)
		if _, err := e.store.AdvanceEpoch(ctxT(t), store.AdvanceEpoch{EpisodeID: e.ep.ID, FromEpoch: e.epoch(), Reason: "repair"}); err != nil {
			t.Fatal(err)
		}
		e.grant(e.epoch())
		p4 := prep("e.bin", "epoch one")
		wantErr(t, evaluate(p4, a3), protocol.CodeApprovalInvalid)
		wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p4)), protocol.CodeApprovalRequired)
		for _, n := range []string{"d.bin", "e.bin"} {
			if _, err := os.Stat(filepath.Join(pub, n)); err == nil {
				t.Fatalf("%s published without its approval", n)
			}
		}
	})

	t.Run("a decision row not written by evaluate does not authorise", func(t *testing.T) {
		p := prep("f.bin", "f")
		eff, _ := e.store.Effect(ctxT(t), mustUUID(p.ID))
		// A human decision with a bad signature, recorded behind the
		// broker's back: the store keeps bytes, the broker verifies them.
		if _, err := e.store.RecordDecision(ctxT(t), store.NewDecision{EffectID: eff.ID, Revision: eff.Revision, Epoch: eff.Epoch,
			Kind: store.DecisionHuman, Verdict: store.VerdictAllow, Body: []byte(`{"decision":"allow"}`), KeyID: "operator", Signature: make([]byte, 64)}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Transition(ctxT(t), store.Transition{EffectID: eff.ID, Revision: eff.Revision, Epoch: eff.Epoch, To: store.Ready}); err != nil {
			t.Fatal(err)
		}
		wantErr(t, e.do(byEffectReq(e, protocol.WorkerCommit, p)), protocol.CodeApprovalRequired)
	})
}
