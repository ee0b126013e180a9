package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// approvalEnv is an operator API wired to a real broker on the real store,
// with one artifact target of each class that matters (class 4 releases,
// class 2 reports) and one decision key, "operator".
type approvalEnv struct {
	*env
	broker *broker.Broker
	key    ed25519.PrivateKey
	ep     store.Episode
	lease  store.Lease
	pub    string
}

func newApprovalEnv(t *testing.T) *approvalEnv {
	t.Helper()
	pubKey, key, _ := ed25519.GenerateKey(rand.Reader)
	a := &approvalEnv{key: key, pub: t.TempDir()}
	a.env = newEnvWith(t, Access{KernelUID: uint32(os.Getuid()), OperatorGID: -1}, func(st *store.Postgres, cfg *Config) {
		payloads, err := broker.OpenPayloads(filepath.Join(t.TempDir(), "payloads"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := broker.New(broker.Config{Store: st, Payloads: payloads, DecisionKeys: map[string]ed25519.PublicKey{"operator": pubKey},
			Adapters: []broker.Adapter{&broker.Artifact{Targets: map[string]broker.ArtifactTarget{
				"releases": {Dir: a.pub}, "reports": {Dir: a.pub, Class: 2}}}},
			LeaseCheck: governor.LeaseCheckWith(func(uuid.UUID) authority.Verdict { return authority.Decide(nil) })})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Reconcile(ctxT(t), uuid.Nil); err != nil {
			t.Fatal(err)
		}
		a.broker, cfg.Approver, cfg.Settler = b, b, b
	})
	ctx := ctxT(t)
	var err error
	if a.ep, err = a.store.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"origin_intent":"release"}`), PolicyVersion: 1}); err != nil {
		t.Fatal(err)
	}
	if a.lease, err = a.store.GrantLease(ctx, store.LeaseGrant{EpisodeID: a.ep.ID, Epoch: 1, TTL: time.Hour,
		Capabilities: artifactLease(t)}); err != nil {
		t.Fatal(err)
	}
	return a
}

// worker sends one request as the episode's worker would, through the
// broker's dispatch table.
func (a *approvalEnv) worker(t *testing.T, req *protocol.WorkerRequest) *protocol.WorkerResponse {
	t.Helper()
	req.Protocol, req.RequestID, req.Epoch = protocol.WorkerVersion, "r", 1
	return a.broker.Handle(ctxT(t), a.ep.ID, req)
}

// awaiting prepares name on target and evaluates it as the worker: a class
// 4 effect is then evaluating, awaiting its approval.
func (a *approvalEnv) awaiting(t *testing.T, target, name string) store.Effect {
	t.Helper()
	tgt, _ := json.Marshal(map[string]string{"name": name})
	p := a.worker(t, &protocol.WorkerRequest{Action: protocol.WorkerPrepare, LeaseID: a.lease.ID.String(), Kind: "artifact",
		TargetID: target, Target: tgt, PayloadB64: base64.StdEncoding.EncodeToString([]byte("bytes of " + name))})
	if !p.OK {
		t.Fatalf("prepare: %+v", p.Error)
	}
	if r := a.worker(t, &protocol.WorkerRequest{Action: protocol.WorkerEvaluate, EffectID: p.Result.ID, Revision: p.Result.Revision}); !r.OK {
		t.Fatalf("evaluate: %+v", r.Error)
	}
	e, err := a.store.Effect(ctxT(t), uuid.MustParse(p.Result.ID))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (a *approvalEnv) commit(t *testing.T, e store.Effect) *protocol.WorkerResponse {
	t.Helper()
	return a.worker(t, &protocol.WorkerRequest{Action: protocol.WorkerCommit, EffectID: e.ID.String(), Revision: e.Revision})
}

func (a *approvalEnv) sign(t *testing.T, key ed25519.PrivateKey, keyID string, doc protocol.ApprovalDocument) *protocol.Approval {
	t.Helper()
	ap, err := broker.SignApproval(key, keyID, doc)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// snapshot is what a refused approval must leave untouched: the effect's
// record and the episode's ledger.
func (a *approvalEnv) snapshot(t *testing.T, id uuid.UUID) string {
	t.Helper()
	e, err := a.store.Effect(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	es, err := a.store.Events(ctxT(t), a.ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s/%d/%d/%s", e.State, e.Revision, len(es), hexHash(es[len(es)-1].Hash))
}

// TestEffectApprovalThroughTheKernel: an operator's signed approval
// submitted to the API is verified against decision_keys as evaluate
// verifies a worker-carried one, recorded as the human decision on the
// exact revision (with its ledger entry), and moves the effect to ready, so
// the worker's plain commit crosses the horizon. A wrong key, a document
// naming another revision, an unknown effect, a malformed body, an effect
// of another class or state are refused with catalogue codes and change
// nothing.
func TestEffectApprovalThroughTheKernel(t *testing.T) {
	a := newApprovalEnv(t)
	ctx := ctxT(t)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)

	e := a.awaiting(t, "releases", "v1.tar")
	if e.State != store.Evaluating || e.Class != 4 {
		t.Fatalf("class 4 after the worker's evaluate: %s class %d", e.State, e.Class)
	}
	if r := a.commit(t, e); r.OK || r.Error.Code != protocol.CodeApprovalRequired {
		t.Fatalf("commit before approval: %+v", r)
	}
	good := broker.ApprovalFor(e, store.VerdictAllow)

	t.Run("refused", func(t *testing.T) {
		before := a.snapshot(t, e.ID)
		otherRevision := good
		otherRevision.EffectRevision++
		otherEpoch := good
		otherEpoch.Epoch++
		otherDigest := good
		otherDigest.PayloadDigest = broker.Digest([]byte("other bytes"))
		badShape := a.sign(t, a.key, "operator", good)
		badShape.Signature = "not base64"
		for _, c := range []struct {
			name string
			id   string
			body any
			code protocol.Code
		}{
			{"stranger's key under the operator's id", e.ID.String(), a.sign(t, stranger, "operator", good), protocol.CodeApprovalInvalid},
			{"key id not in decision_keys", e.ID.String(), a.sign(t, a.key, "someone", good), protocol.CodeApprovalInvalid},
			{"another revision", e.ID.String(), a.sign(t, a.key, "operator", otherRevision), protocol.CodeApprovalInvalid},
			{"another epoch", e.ID.String(), a.sign(t, a.key, "operator", otherEpoch), protocol.CodeApprovalInvalid},
			{"another payload", e.ID.String(), a.sign(t, a.key, "operator", otherDigest), protocol.CodeApprovalInvalid},
			{"signature shape", e.ID.String(), badShape, protocol.CodeApprovalInvalid},
			{"unknown effect", uuid.New().String(), a.sign(t, a.key, "operator", good), protocol.CodeNotFound},
			{"not an effect id", "v1.tar", a.sign(t, a.key, "operator", good), protocol.CodeInvalidField},
			{"unknown field", e.ID.String(), map[string]any{"document": good, "signature": "x", "key_id": "operator", "force": true}, protocol.CodeUnknownField},
		} {
			var out EffectView
			err := a.client.do(ctx, http.MethodPost, "/v1/effects/"+c.id+"/approval", nil, c.body, &out)
			if protocol.AsWire(err).Code != c.code {
				t.Errorf("%s: %v, want %s", c.name, err, c.code)
			}
		}
		if after := a.snapshot(t, e.ID); after != before {
			t.Fatalf("a refused approval changed the effect or the ledger: %s → %s", before, after)
		}
		if r := a.commit(t, e); r.OK || r.Error.Code != protocol.CodeApprovalRequired {
			t.Fatalf("commit after refused approvals: %+v", r)
		}
	})

	t.Run("accepted", func(t *testing.T) {
		v, err := a.client.Approve(ctx, e.ID.String(), a.sign(t, a.key, "operator", good))
		if err != nil || v.State != string(store.Ready) || v.Revision != e.Revision {
			t.Fatalf("approve: %+v %v", v, err)
		}
		// effect show lists the human decision, bound to the revision.
		shown, err := a.client.Effect(ctx, e.ID.String())
		if err != nil || len(shown.Decisions) != 1 || shown.Decisions[0].Kind != store.DecisionHuman ||
			shown.Decisions[0].Verdict != store.VerdictAllow || shown.Decisions[0].Revision != e.Revision || shown.Decisions[0].KeyID != "operator" {
			t.Fatalf("effect show decisions: %+v %v", shown.Decisions, err)
		}
		es, err := a.store.Events(ctx, a.ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		var recorded bool
		for _, ev := range es {
			var m map[string]any
			_ = json.Unmarshal(ev.Body, &m)
			if ev.Kind == "decision_recorded" && m["kind"] == store.DecisionHuman && m["verdict"] == store.VerdictAllow &&
				m["key_id"] == "operator" && m["effect_id"] == e.ID.String() {
				recorded = true
			}
		}
		if !recorded {
			t.Fatal("no decision_recorded ledger entry for the human approval")
		}
		// Once decided, the revision takes no second decision: the same
		// answer again is answered from its resolved Action, recording
		// nothing; another answer is refused.
		if _, err = a.client.Approve(ctx, e.ID.String(), a.sign(t, a.key, "operator", good)); err != nil {
			t.Fatalf("the same approval again: %v", err)
		}
		if shown, _ := a.client.Effect(ctx, e.ID.String()); len(shown.Decisions) != 1 {
			t.Fatalf("%d decisions after a replayed approval", len(shown.Decisions))
		}
		_, err = a.client.Approve(ctx, e.ID.String(), a.sign(t, a.key, "operator", broker.ApprovalFor(e, store.VerdictDeny)))
		wantCode(t, err, protocol.CodeIllegalTransition)
		// The worker commits without carrying anything.
		r := a.commit(t, e)
		if !r.OK || r.Result.State != string(store.Committed) {
			t.Fatalf("worker commit after the kernel recorded the approval: %+v", r.Error)
		}
		if b, err := os.ReadFile(filepath.Join(a.pub, "v1.tar")); err != nil || !bytes.Equal(b, []byte("bytes of v1.tar")) {
			t.Fatalf("published: %q %v", b, err)
		}
		if v, err := a.client.Verify(ctx, a.ep.ID.String()); err != nil || !v.OK {
			t.Fatalf("ledger: %+v %v", v, err)
		}
	})

	t.Run("denied", func(t *testing.T) {
		d := a.awaiting(t, "releases", "v2.tar")
		v, err := a.client.Approve(ctx, d.ID.String(), a.sign(t, a.key, "operator", broker.ApprovalFor(d, store.VerdictDeny)))
		if err != nil || v.State != string(store.Evaluating) {
			t.Fatalf("deny: %+v %v", v, err)
		}
		// A denial is final for the revision: a later allow is refused,
		// and could not outvote it at commit anyway.
		_, err = a.client.Approve(ctx, d.ID.String(), a.sign(t, a.key, "operator", broker.ApprovalFor(d, store.VerdictAllow)))
		wantCode(t, err, protocol.CodeIllegalTransition)
		if r := a.commit(t, d); r.OK || r.Error.Code != protocol.CodeApprovalRequired {
			t.Fatalf("commit of a denied revision: %+v", r)
		}
		if _, err := os.Stat(filepath.Join(a.pub, "v2.tar")); err == nil {
			t.Fatal("a denied artifact was published")
		}
	})

	t.Run("other class", func(t *testing.T) {
		c2 := a.awaiting(t, "reports", "r.txt")
		before := a.snapshot(t, c2.ID)
		_, err := a.client.Approve(ctx, c2.ID.String(), a.sign(t, a.key, "operator", broker.ApprovalFor(c2, store.VerdictAllow)))
		wantCode(t, err, protocol.CodeApprovalInvalid)
		if after := a.snapshot(t, c2.ID); after != before {
			t.Fatalf("changed: %s → %s", before, after)
		}
	})
}

// TestEffectApprovalUnavailable: without a broker the route answers
// unknown_action (501), like episode start without a controller.
func TestEffectApprovalUnavailable(t *testing.T) {
	e := newEnv(t, Access{KernelUID: uint32(os.Getuid()), OperatorGID: -1})
	_, err := e.client.Approve(context.Background(), uuid.New().String(), &protocol.Approval{})
	wantCode(t, err, protocol.CodeUnknownAction)
}

// artifactLease is a lease document, as the kernel mints one, granting
// artifacts on both targets with budgets no test reaches.
func artifactLease(t *testing.T) json.RawMessage {
	t.Helper()
	c, err := authority.Compile(authority.Spec{MaxClass: authority.MaxClass, Allow: []string{"**"}, Forbid: []string{},
		Grants: []authority.Grant{{Kind: "artifact", Target: "releases", MaxClass: 4}, {Kind: "artifact", Target: "reports", MaxClass: 4}},
		Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 30, EffectsPerMinute: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := authority.EncodeLease(c)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}
