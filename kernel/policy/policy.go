package policy

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/gowebpki/jcs"
)

// Context is the domain-separation prefix of every policy signature, so a
// signature over a policy can never be replayed as an approval, a decision
// or anything else signed with the same key (and the other way round).
const Context = "autonomic.policy.v1\n"

// Schema names the document format this package admits.
const Schema = "autonomic.policy.v1"

// Bounds on what is admitted at all.
const (
	MaxSigned     = 256 << 10 // bytes of one signed policy envelope
	maxVersion    = 1 << 53   // versions survive RFC 8785 (doubles) exactly
	maxIDLen      = 128
	signatureSize = ed25519.SignatureSize
)

func limits() protocol.Limits { return protocol.Limits{MaxDepth: 8, MaxNodes: 8192} }

// Document is a policy's content: what is signed.
type Document struct {
	Schema     string         `json:"schema"`
	ID         string         `json:"id"`
	Version    int64          `json:"version"`
	Capability authority.Spec `json:"capability"`
	Semantic   Semantic       `json:"semantic"`
	// Inference is optional (inference.go): absent, the episode may make
	// no model call at all. Absent is omitted from the signed form, so
	// policies signed before it existed keep their digest.
	Inference *Inference `json:"inference,omitempty"`

	// Egress (issue 14, egress.go): optional; absent, the episode has no
	// egress at all.
	Egress *Egress `json:"egress,omitempty"`
}

// Semantic is the policy's stance towards semantic observation.
type Semantic struct {
	// MaxRisk in [0, 1]: the semantic risk score above which the episode
	// yields (narrows) rather than proceeds.
	MaxRisk float64 `json:"max_risk"`
	// Scope, optional, are globs of the paths the task is about, inside
	// capability.allow: a change mostly outside them is scope drift the
	// bank reads high, though the capability allows it. Absent: the
	// capability's allow list.
	Scope []string `json:"scope,omitempty"`
}

// SemanticScope is the scope the sensor bank reads drift against.
func (d *Document) SemanticScope() []string {
	if d.Semantic.Scope != nil {
		return d.Semantic.Scope
	}
	return d.Capability.Allow
}

// Signed is the envelope on the wire and on disk.
type Signed struct {
	Policy    json.RawMessage `json:"policy"`
	KeyID     string          `json:"key_id"`
	Signature string          `json:"signature"` // standard base64 of 64 bytes
}

// Policy is an admitted policy: signature verified, document decoded and
// its capability compiled.
type Policy struct {
	Document
	KeyID string
	// Digest is "sha256:" and the hex SHA-256 of the canonical document:
	// what leases and effects record as the policy they were made under.
	Digest     string
	Capability authority.Capability
}

// Keys is the policy_keys set: key id → Ed25519 public key.
type Keys map[string]ed25519.PublicKey

// ParseKeys builds a key set from configuration (key id → standard base64
// of the 32-byte public key).
func ParseKeys(cfg map[string]string) (Keys, error) {
	keys := make(Keys, len(cfg))
	for id, b64 := range cfg {
		if !validKeyID(id) {
			return nil, fmt.Errorf("policy_keys: key id %q is not valid", id)
		}
		raw, err := base64.StdEncoding.Strict().DecodeString(b64)
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("policy_keys: key %q is not a base64 Ed25519 public key", id)
		}
		keys[id] = ed25519.PublicKey(raw)
	}
	return keys, nil
}

// Message is the exact byte string a policy signature covers.
func Message(canonical []byte) []byte {
	return append([]byte(Context), canonical...)
}

// Sign produces the signed envelope of doc (what an operator's signing
// tool does; the kernel itself never holds a policy private key).
func Sign(key ed25519.PrivateKey, keyID string, doc Document) ([]byte, error) {
	// Empty lists, never null: the decoder reads null as a missing field.
	c := &doc.Capability
	if c.Grants == nil {
		c.Grants = []authority.Grant{}
	}
	if c.Allow == nil {
		c.Allow = []string{}
	}
	if c.Forbid == nil {
		c.Forbid = []string{}
	}
	if doc.Inference != nil && doc.Inference.Models == nil {
		inf := *doc.Inference
		inf.Models = []string{}
		doc.Inference = &inf
	}
	if doc.Egress != nil && doc.Egress.Allow == nil {
		e := *doc.Egress
		e.Allow = []string{}
		doc.Egress = &e
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(Signed{
		Policy: canon, KeyID: keyID,
		Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, Message(canon))),
	})
}

// Verify admits a signed policy or refuses it with a *Error.
func Verify(keys Keys, signed []byte) (*Policy, error) {
	if len(signed) > MaxSigned {
		return nil, refuse(ErrMalformed, protocol.E(protocol.CodeFrameTooLarge), nil)
	}
	if !utf8.Valid(signed) {
		return nil, refuse(ErrMalformed, protocol.E(protocol.CodeNotUTF8), nil)
	}
	if err := protocol.CheckShape(signed, limits()); err != nil {
		return nil, refuse(ErrMalformed, err, nil)
	}
	var env struct {
		Policy    json.RawMessage `json:"policy"`
		KeyID     *string         `json:"key_id"`
		Signature *string         `json:"signature"`
	}
	if err := protocol.DecodeStrict(signed, &env); err != nil {
		return nil, refuse(ErrMalformed, err, nil)
	}
	if len(env.Policy) == 0 || string(env.Policy) == "null" {
		return nil, refuse(ErrMalformed, protocol.E(protocol.CodeMissingField), errors.New("policy"))
	}
	if env.KeyID == nil || env.Signature == nil || *env.Signature == "" {
		return nil, refuse(ErrUnsigned, protocol.E(protocol.CodeForbidden), nil)
	}
	pub, ok := keys[*env.KeyID]
	if !validKeyID(*env.KeyID) || !ok || len(pub) != ed25519.PublicKeySize {
		return nil, refuse(ErrUnknownKey, protocol.E(protocol.CodeForbidden), nil)
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(*env.Signature)
	if err != nil || len(sig) != signatureSize {
		return nil, refuse(ErrBadSignature, protocol.E(protocol.CodeForbidden), errors.New("signature is not base64 of 64 bytes"))
	}
	canon, err := jcs.Transform(env.Policy)
	if err != nil {
		return nil, refuse(ErrMalformed, protocol.E(protocol.CodeMalformedJSON), err)
	}
	if !ed25519.Verify(pub, Message(canon), sig) {
		return nil, refuse(ErrBadSignature, protocol.E(protocol.CodeForbidden), nil)
	}
	// Authenticated from here on: the signer vouched for these bytes. They
	// are still decoded strictly, because a signer's tool can be wrong.
	doc, capability, err := decodeDocument(env.Policy)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(canon)
	return &Policy{Document: doc, KeyID: *env.KeyID, Digest: "sha256:" + hex.EncodeToString(sum[:]), Capability: capability}, nil
}

// decodeDocument strictly decodes and validates a policy document. Every
// top-level field is required: a policy that forgot its forbid list must
// not silently mean "forbid nothing".
func decodeDocument(raw []byte) (Document, authority.Capability, error) {
	var none authority.Capability
	if err := protocol.CheckShape(raw, limits()); err != nil {
		return Document{}, none, refuse(ErrMalformed, err, nil)
	}
	var w struct {
		Schema     *string `json:"schema"`
		ID         *string `json:"id"`
		Version    *int64  `json:"version"`
		Capability *struct {
			MaxClass *authority.Class  `json:"max_class"`
			Grants   []authority.Grant `json:"grants"`
			Allow    []string          `json:"allow"`
			Forbid   []string          `json:"forbid"`
			Budget   *authority.Budget `json:"budget"`
			// Lift is optional: absent, every default forbid holds.
			Lift []string `json:"lift"`
		} `json:"capability"`
		Semantic *struct {
			MaxRisk *float64 `json:"max_risk"`
			Scope   []string `json:"scope"`
		} `json:"semantic"`
		Inference *inferenceWire `json:"inference"`

		// Egress (issue 14): optional, see egress.go.
		Egress *egressWire `json:"egress"`
	}
	if err := protocol.DecodeStrict(raw, &w); err != nil {
		return Document{}, none, refuse(ErrMalformed, err, nil)
	}
	missing := func(name string) error {
		return refuse(ErrMalformed, protocol.E(protocol.CodeMissingField), errors.New(name))
	}
	switch {
	case w.Schema == nil:
		return Document{}, none, missing("schema")
	case w.ID == nil:
		return Document{}, none, missing("id")
	case w.Version == nil:
		return Document{}, none, missing("version")
	case w.Capability == nil:
		return Document{}, none, missing("capability")
	case w.Capability.MaxClass == nil:
		return Document{}, none, missing("capability.max_class")
	case w.Capability.Grants == nil:
		return Document{}, none, missing("capability.grants")
	case w.Capability.Allow == nil:
		return Document{}, none, missing("capability.allow")
	case w.Capability.Forbid == nil:
		return Document{}, none, missing("capability.forbid")
	case w.Capability.Budget == nil:
		return Document{}, none, missing("capability.budget")
	case w.Semantic == nil:
		return Document{}, none, missing("semantic")
	case w.Semantic.MaxRisk == nil:
		return Document{}, none, missing("semantic.max_risk")
	}
	invalid := func(format string, args ...any) error {
		return refuse(ErrInvalid, protocol.E(protocol.CodeInvalidField), fmt.Errorf(format, args...))
	}
	doc := Document{
		Schema: *w.Schema, ID: *w.ID, Version: *w.Version,
		Capability: authority.Spec{
			MaxClass: *w.Capability.MaxClass, Grants: w.Capability.Grants,
			Allow: w.Capability.Allow, Forbid: w.Capability.Forbid, Budget: *w.Capability.Budget,
			Lift: w.Capability.Lift,
		},
		Semantic: Semantic{MaxRisk: *w.Semantic.MaxRisk, Scope: w.Semantic.Scope},
	}
	switch {
	case doc.Schema != Schema:
		return Document{}, none, invalid("schema is not %s", Schema)
	case !validPolicyID(doc.ID):
		return Document{}, none, invalid("id")
	case doc.Version < 1 || doc.Version > maxVersion:
		return Document{}, none, invalid("version outside 1..2^53")
	case math.IsNaN(doc.Semantic.MaxRisk) || doc.Semantic.MaxRisk < 0 || doc.Semantic.MaxRisk > 1:
		return Document{}, none, invalid("semantic.max_risk outside [0, 1]")
	}
	if doc.Semantic.Scope != nil {
		if len(doc.Semantic.Scope) == 0 {
			return Document{}, none, invalid("semantic.scope is empty (omit it to read drift against capability.allow)")
		}
		if _, err := authority.Compile(authority.Spec{MaxClass: authority.ClassIsolated, Allow: doc.Semantic.Scope}); err != nil {
			return Document{}, none, invalid("semantic.scope: %w", err)
		}
	}
	if w.Inference != nil {
		inf, err := w.Inference.check()
		if err != nil {
			return Document{}, none, err
		}
		doc.Inference = &inf
	}
	capability, err := authority.Compile(doc.Capability)
	if err != nil {
		return Document{}, none, invalid("capability: %w", err)
	}

	// Egress (issue 14).
	if doc.Egress, err = decodeEgress(w.Egress); err != nil {
		return Document{}, none, invalid("%w", err)
	}
	return doc, capability, nil
}

// Supersedes says whether next may replace current as an episode's policy
// (current nil: next is the first). A higher version of the same policy
// id may; the same version with the same digest is a harmless reload;
// anything else is refused, so an old signed policy cannot be replayed to
// widen authority again.
func Supersedes(current, next *Policy) error {
	if next == nil {
		return refuse(ErrInvalid, protocol.E(protocol.CodeMissingField), errors.New("no policy"))
	}
	if current == nil {
		return nil
	}
	transition := protocol.E(protocol.CodeIllegalTransition)
	switch {
	case next.ID != current.ID:
		return refuse(ErrOtherPolicy, transition, nil)
	case next.Version < current.Version:
		return refuse(ErrRollback, transition, fmt.Errorf("version %d after %d", next.Version, current.Version))
	case next.Version == current.Version && next.Digest != current.Digest:
		return refuse(ErrVersionReuse, transition, fmt.Errorf("version %d signed twice with different content", next.Version))
	}
	return nil
}

func validKeyID(s string) bool { return validToken(s, 64) }

func validPolicyID(s string) bool { return validToken(s, maxIDLen) }

// validToken: [A-Za-z0-9][A-Za-z0-9._-]*, bounded; the key id shape of
// protocol approvals.
func validToken(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}
