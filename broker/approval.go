package broker

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
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
