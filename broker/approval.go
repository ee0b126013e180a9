package broker

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
	"github.com/gowebpki/jcs"
)

// ApprovalMessage is what a human approval signs: the context line followed
// by the RFC 8785 canonical JSON of the document.
func ApprovalMessage(doc protocol.ApprovalDocument) ([]byte, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, err
	}
	return append([]byte(protocol.ApprovalContext), canon...), nil
}

// ApprovalFor is the document that approves exactly e as it stands.
func ApprovalFor(e store.Effect, decision string) protocol.ApprovalDocument {
	return protocol.ApprovalDocument{
		EffectID: e.ID.String(), EffectRevision: e.Revision, EpisodeID: e.EpisodeID.String(),
		Epoch: e.Epoch, PayloadDigest: e.PayloadDigest, Decision: decision,
	}
}

// SignApproval signs doc with key (what `autonomic effect approve` does).
func SignApproval(key ed25519.PrivateKey, keyID string, doc protocol.ApprovalDocument) (*protocol.Approval, error) {
	msg, err := ApprovalMessage(doc)
	if err != nil {
		return nil, err
	}
	return &protocol.Approval{Document: doc, Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, msg)), KeyID: keyID}, nil
}

// verifyApproval checks that a is signed by a configured key and names
// exactly e. Every mismatch is approval_invalid: the document is bound to
// one revision of one effect in one epoch, and nothing else.
func verifyApproval(keys map[string]ed25519.PublicKey, e store.Effect, a *protocol.Approval) error {
	if err := a.Validate(); err != nil {
		return protocol.Errorf(protocol.CodeApprovalInvalid, "shape: %w", err)
	}
	pub, ok := keys[a.KeyID]
	if !ok || len(pub) != ed25519.PublicKeySize {
		return protocol.Errorf(protocol.CodeApprovalInvalid, "unknown key")
	}
	want := ApprovalFor(e, a.Document.Decision)
	if a.Document != want {
		return protocol.Errorf(protocol.CodeApprovalInvalid, "document names another effect revision")
	}
	msg, err := ApprovalMessage(a.Document)
	if err != nil {
		return protocol.Errorf(protocol.CodeApprovalInvalid, "canonical form: %w", err)
	}
	sig, _ := base64.StdEncoding.DecodeString(a.Signature)
	if !ed25519.Verify(pub, msg, sig) {
		return protocol.Errorf(protocol.CodeApprovalInvalid, "signature does not verify")
	}
	return nil
}

// approvalDecision verifies a against e and returns it as the human
// decision on e's revision under epoch. The row holds the signed bytes (the
// canonical document and the signature), so commit verifies them again
// rather than trusting that this check ran; the store's decision_recorded
// ledger entry names the key and the digests of both.
func (b *Broker) approvalDecision(e store.Effect, epoch int64, a *protocol.Approval) (store.NewDecision, error) {
	if err := verifyApproval(b.cfg.DecisionKeys, e, a); err != nil {
		return store.NewDecision{}, err
	}
	doc, _ := ApprovalMessage(a.Document)
	sig, _ := base64.StdEncoding.DecodeString(a.Signature)
	return store.NewDecision{EffectID: e.ID, Revision: e.Revision, Epoch: epoch,
		Kind: store.DecisionHuman, Verdict: a.Document.Decision, Body: doc[len(protocol.ApprovalContext):],
		KeyID: a.KeyID, Signature: sig}, nil
}

// Approve records an operator's signed decision on a class 4 effect that
// awaits one, so the worker's commit needs nothing from the operator: it
// is Evaluate's class 4 step run by the kernel — the same verification
// against decision_keys, the same decision row bound to the effect's
// current revision and epoch, and for allow the same move to ready, after
// which the worker's commit passes check 7 from the recorded bytes. A deny
// is recorded and leaves the effect evaluating; it is final for the
// revision, as at evaluate.
//
// Only an effect at evaluating takes one: its worker has asked for
// evaluation, so any automatic verification has run under the worker's
// request and not under the operator's. Anything else — another class,
// another state, a document naming another revision, epoch or digest, an
// unknown key, a bad signature — is refused with a catalogue code before
// anything is written.
func (b *Broker) Approve(ctx context.Context, effectID uuid.UUID, a *protocol.Approval) (store.Effect, error) {
	if !b.reconciled.Load() {
		return store.Effect{}, protocol.Errorf(protocol.CodeAuthorityUnavailable, "reconciliation has not completed")
	}
	if a == nil {
		return store.Effect{}, protocol.Errorf(protocol.CodeMissingField, "approval")
	}
	e, err := b.cfg.Store.Effect(ctx, effectID)
	if err != nil {
		return store.Effect{}, err
	}
	if !e.AwaitsHuman() {
		return store.Effect{}, protocol.Errorf(protocol.CodeApprovalInvalid, "class %d effects within their lease take no human approval", e.Class)
	}
	// An effect past evaluating takes no new answer; the same answer again
	// (a replay, a second operator's identical approval, a retry after a
	// crash) is answered from the resolved Action, recording nothing.
	if e.State != store.Evaluating && e.State != store.Ready {
		return store.Effect{}, protocol.Errorf(protocol.CodeIllegalTransition, "approval of an effect in state %s", e.State)
	}
	d, err := b.approvalDecision(e, e.Epoch, a)
	if err != nil {
		return store.Effect{}, err
	}
	// The Action the effect's evaluation opened for this revision: the
	// approval answers it, or nothing.
	action, err := b.cfg.Store.ActionFor(ctx, e.ID, e.Revision, e.Epoch)
	if err != nil {
		return store.Effect{}, protocol.Errorf(protocol.CodeIllegalTransition, "no action awaits revision %d: %v", e.Revision, err)
	}
	// Recorded under the episode's ownership lease, which names the
	// kernel process: this kernel takes it (a renewal when it drives the
	// episode; refused while another live kernel holds it), as the API's
	// abort of an episode not driven here does.
	if _, err := b.cfg.Store.AcquireOwnership(ctx, e.EpisodeID); err != nil {
		return store.Effect{}, err
	}
	// One transaction: the Action checked against the effect again, the
	// decision recorded, the effect made ready, the Action resolved once.
	_, out, err := b.cfg.Store.ResolveAction(ctx, store.ActionResolution{ActionID: action.ID, Decision: d})
	return out, err
}
