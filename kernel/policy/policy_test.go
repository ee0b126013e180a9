package policy

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/protocol"
)

func exampleDoc() Document {
	return Document{
		Schema: Schema, ID: "coding-agent-policy", Version: 1,
		Capability: authority.Spec{
			MaxClass: authority.ClassAuthoritative,
			Grants:   []authority.Grant{{Target: "authoritative_repo", Kind: "git_commit", MaxClass: authority.ClassAuthoritative}},
			Allow:    []string{"lib/**"},
			Forbid:   []string{"test/**", ".env", "**/*secret*"},
			Budget:   authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 8 << 20, EffectsPerMinute: 10},
		},
		Semantic: Semantic{MaxRisk: 0.65},
	}
}

type signer struct {
	id   string
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

func newSigner(t *testing.T, id string) signer {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{id: id, priv: priv, pub: pub}
}

func (s signer) sign(t *testing.T, doc Document) []byte {
	t.Helper()
	b, err := Sign(s.priv, s.id, doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerifyAcceptsSignedPolicy(t *testing.T) {
	ops := newSigner(t, "ops-2026")
	keys := Keys{ops.id: ops.pub}
	p, err := Verify(keys, ops.sign(t, exampleDoc()))
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != "coding-agent-policy" || p.Version != 1 || p.KeyID != "ops-2026" || !strings.HasPrefix(p.Digest, "sha256:") || len(p.Digest) != 71 {
		t.Fatalf("policy %+v", p)
	}
	r := authority.Request{Class: authority.ClassIsolated, Path: "lib/a.ex"}
	if got := p.Capability.Check(&r); got != authority.Allowed {
		t.Fatalf("compiled capability refused %v", got)
	}
	// Whitespace and key order are not part of what is signed.
	var env Signed
	if err := json.Unmarshal(ops.sign(t, exampleDoc()), &env); err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	_ = json.Unmarshal(env.Policy, &generic)
	pretty, _ := json.MarshalIndent(generic, "", "   ")
	env.Policy = pretty
	reformatted, _ := json.Marshal(env)
	q, err := Verify(keys, reformatted)
	if err != nil {
		t.Fatalf("reformatted: %v", err)
	}
	if q.Digest != p.Digest {
		t.Fatal("digest depends on formatting")
	}
}

// tamper returns the envelope with its policy document replaced by f(doc),
// keeping the original signature.
func tamper(t *testing.T, signed []byte, f func(map[string]any)) []byte {
	t.Helper()
	var env map[string]json.RawMessage
	if err := json.Unmarshal(signed, &env); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(env["policy"], &doc); err != nil {
		t.Fatal(err)
	}
	f(doc)
	env["policy"], _ = json.Marshal(doc)
	out, _ := json.Marshal(env)
	return out
}

func setEnv(t *testing.T, signed []byte, key string, v any) []byte {
	t.Helper()
	var env map[string]any
	if err := json.Unmarshal(signed, &env); err != nil {
		t.Fatal(err)
	}
	if v == nil {
		delete(env, key)
	} else {
		env[key] = v
	}
	out, _ := json.Marshal(env)
	return out
}

func TestVerifyRefuses(t *testing.T) {
	ops, rogue := newSigner(t, "ops"), newSigner(t, "rogue")
	keys := Keys{ops.id: ops.pub}
	good := ops.sign(t, exampleDoc())
	withDoc := func(f func(*Document)) []byte {
		d := exampleDoc()
		f(&d)
		return ops.sign(t, d)
	}
	rogueAsOps := rogue.sign(t, exampleDoc())
	rogueAsOps = setEnv(t, rogueAsOps, "key_id", "ops")

	const (
		budget0 = `"budget":{"bytes_per_effect":0,"bytes_total":0,"effects_per_minute":0}`
		head    = `{"schema":"autonomic.policy.v1","id":"p","version":1,`
		sem     = `"semantic":{"max_risk":0.5}`
	)
	cases := []refusalCase{
		{"no signature", setEnv(t, good, "signature", nil), ErrUnsigned, protocol.CodeForbidden},
		{"empty signature", setEnv(t, good, "signature", ""), ErrUnsigned, protocol.CodeForbidden},
		{"no key id", setEnv(t, good, "key_id", nil), ErrUnsigned, protocol.CodeForbidden},
		{"unknown key", rogue.sign(t, exampleDoc()), ErrUnknownKey, protocol.CodeForbidden},
		{"signed by another key under a known id", rogueAsOps, ErrBadSignature, protocol.CodeForbidden},
		{"signature not base64", setEnv(t, good, "signature", "!!"), ErrBadSignature, protocol.CodeForbidden},
		{"signature too short", setEnv(t, good, "signature", base64.StdEncoding.EncodeToString(make([]byte, 63))), ErrBadSignature, protocol.CodeForbidden},
		{"zero signature", setEnv(t, good, "signature", base64.StdEncoding.EncodeToString(make([]byte, 64))), ErrBadSignature, protocol.CodeForbidden},
		{"widened class", tamper(t, good, func(d map[string]any) { d["capability"].(map[string]any)["max_class"] = 4 }), ErrBadSignature, protocol.CodeForbidden},
		{"dropped forbid", tamper(t, good, func(d map[string]any) { d["capability"].(map[string]any)["forbid"] = []string{} }), ErrBadSignature, protocol.CodeForbidden},
		{"bumped version", tamper(t, good, func(d map[string]any) { d["version"] = 2 }), ErrBadSignature, protocol.CodeForbidden},
		{"unknown envelope field", setEnv(t, good, "comment", "hi"), ErrMalformed, protocol.CodeUnknownField},
		{"duplicate key in document", []byte(strings.Replace(string(good), `"version":1`, `"version":1,"version":9`, 1)), ErrMalformed, protocol.CodeDuplicateKey},
		{"duplicate envelope key", []byte(strings.Replace(string(good), `"key_id":"ops"`, `"key_id":"ops","key_id":"rogue"`, 1)), ErrMalformed, protocol.CodeDuplicateKey},
		{"no policy", setEnv(t, good, "policy", nil), ErrMalformed, protocol.CodeMissingField},
		{"not json", []byte("policy: yes"), ErrMalformed, protocol.CodeMalformedJSON},
		{"array", []byte("[]"), ErrMalformed, protocol.CodeMalformedJSON},
		{"trailing data", append(append([]byte{}, good...), "{}"...), ErrMalformed, protocol.CodeTrailingData},
		{"not utf-8", []byte("{\"policy\":\"\xff\"}"), ErrMalformed, protocol.CodeNotUTF8},
		{"too large", []byte(`{"policy":"` + strings.Repeat("a", MaxSigned) + `"}`), ErrMalformed, protocol.CodeFrameTooLarge},
		{"too deep", []byte(strings.Repeat(`{"a":`, 20) + "1" + strings.Repeat("}", 20)), ErrMalformed, protocol.CodeTooDeep},
		{"signed wrong schema", withDoc(func(d *Document) { d.Schema = "autonomic.policy.v0" }), ErrInvalid, protocol.CodeInvalidField},
		{"signed bad id", withDoc(func(d *Document) { d.ID = "../etc" }), ErrInvalid, protocol.CodeInvalidField},
		{"signed version 0", withDoc(func(d *Document) { d.Version = 0 }), ErrInvalid, protocol.CodeInvalidField},
		{"signed risk above 1", withDoc(func(d *Document) { d.Semantic.MaxRisk = 1.5 }), ErrInvalid, protocol.CodeInvalidField},
		{"signed bad glob", withDoc(func(d *Document) { d.Capability.Allow = []string{"/etc/**"} }), ErrInvalid, protocol.CodeInvalidField},
		{"signed class 9", withDoc(func(d *Document) { d.Capability.MaxClass = 9 }), ErrInvalid, protocol.CodeInvalidField},
		{"signed malformed forbid", withDoc(func(d *Document) { d.Capability.Forbid = []string{"secrets[/**"} }), ErrInvalid, protocol.CodeInvalidField},
		{"signed invisible glob", withDoc(func(d *Document) { d.Capability.Forbid = []string{".g\u200cit/**"} }), ErrInvalid, protocol.CodeInvalidField},
		{"signed unknown lift", withDoc(func(d *Document) { d.Capability.Lift = []string{"everything"} }), ErrInvalid, protocol.CodeInvalidField},
		{"signed empty scope", signRaw(t, ops, head+`"capability":{"max_class":1,"grants":[],"allow":[],"forbid":[],`+budget0+`},"semantic":{"max_risk":0.5,"scope":[]}}`), ErrInvalid, protocol.CodeInvalidField},
		{"signed bad scope glob", withDoc(func(d *Document) { d.Semantic.Scope = []string{"/etc/**"} }), ErrInvalid, protocol.CodeInvalidField},
		// Documents a signer's tool got wrong: signed, but not in the schema.
		{"signed unknown field", signRaw(t, ops, head+`"capability":{"max_class":1,"grants":[],"allow":[],"forbid":[],`+budget0+`},`+sem+`,"extra":true}`), ErrMalformed, protocol.CodeUnknownField},
		{"signed without forbid", signRaw(t, ops, head+`"capability":{"max_class":1,"grants":[],"allow":[],`+budget0+`},`+sem+`}`), ErrMalformed, protocol.CodeMissingField},
		{"signed case-folded field", signRaw(t, ops, head+`"capability":{"MAX_CLASS":4,"max_class":1,"grants":[],"allow":[],"forbid":[],`+budget0+`},`+sem+`}`), ErrMalformed, protocol.CodeUnknownField},
		{"signed null grants", signRaw(t, ops, head+`"capability":{"max_class":1,"grants":null,"allow":[],"forbid":[],`+budget0+`},`+sem+`}`), ErrMalformed, protocol.CodeMissingField},
		{"signed fractional version", signRaw(t, ops, `{"schema":"autonomic.policy.v1","id":"p","version":1.5,"capability":{"max_class":1,"grants":[],"allow":[],"forbid":[],`+budget0+`},`+sem+`}`), ErrMalformed, protocol.CodeInvalidField},
		{"signed negative class", signRaw(t, ops, head+`"capability":{"max_class":-1,"grants":[],"allow":[],"forbid":[],`+budget0+`},`+sem+`}`), ErrMalformed, protocol.CodeInvalidField},
		{"signed string", signRaw(t, ops, `"just a string"`), ErrMalformed, protocol.CodeMalformedJSON},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Verify(keys, c.in)
			if err == nil {
				t.Fatalf("admitted %+v", p)
			}
			var perr *Error
			if !errors.As(err, &perr) || !errors.Is(err, c.want) {
				t.Fatalf("error %v, want refusal %q", err, c.want)
			}
			if got := protocol.AsWire(err).Code; got != c.code {
				t.Fatalf("wire code %s, want %s (%v)", got, c.code, err)
			}
		})
	}
}

type refusalCase struct {
	name string
	in   []byte
	want Refusal
	code protocol.Code
}

// signRaw signs a hand-written document, to test what the decoder does
// with content no Document could produce.
func signRaw(t *testing.T, s signer, doc string) []byte {
	t.Helper()
	var generic any
	if err := json.Unmarshal([]byte(doc), &generic); err != nil {
		t.Fatal(err)
	}
	canon := canonical(t, []byte(doc))
	out, _ := json.Marshal(Signed{Policy: json.RawMessage(doc), KeyID: s.id,
		Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(s.priv, Message(canon)))})
	return out
}

func TestSignatureIsDomainSeparated(t *testing.T) {
	ops := newSigner(t, "ops")
	raw, _ := json.Marshal(exampleDoc())
	canon := canonical(t, raw)
	// A signature over the bare canonical document (as another signing
	// context might produce) must not verify as a policy.
	env, _ := json.Marshal(Signed{Policy: canon, KeyID: ops.id, Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(ops.priv, canon))})
	if _, err := Verify(Keys{ops.id: ops.pub}, env); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("signature without context: %v", err)
	}
}

func TestParseKeys(t *testing.T) {
	ops := newSigner(t, "ops")
	keys, err := ParseKeys(map[string]string{"ops": base64.StdEncoding.EncodeToString(ops.pub)})
	if err != nil || !keys["ops"].Equal(ops.pub) {
		t.Fatalf("ParseKeys: %v", err)
	}
	for name, cfg := range map[string]map[string]string{
		"short key":  {"ops": base64.StdEncoding.EncodeToString(ops.pub[:31])},
		"not base64": {"ops": "***"},
		"bad id":     {"../ops": base64.StdEncoding.EncodeToString(ops.pub)},
	} {
		if _, err := ParseKeys(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSupersedes(t *testing.T) {
	ops := newSigner(t, "ops")
	keys := Keys{ops.id: ops.pub}
	mk := func(id string, version int64, risk float64) *Policy {
		d := exampleDoc()
		d.ID, d.Version, d.Semantic.MaxRisk = id, version, risk
		p, err := Verify(keys, ops.sign(t, d))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1, v2, v2b, other := mk("p", 1, 0.5), mk("p", 2, 0.5), mk("p", 2, 0.9), mk("q", 3, 0.5)
	cases := []struct {
		name      string
		cur, next *Policy
		want      error
	}{
		{"first", nil, v1, nil},
		{"forward", v1, v2, nil},
		{"reload", v2, v2, nil},
		{"rollback", v2, v1, ErrRollback},
		{"version reuse", v2, v2b, ErrVersionReuse},
		{"other policy", v2, other, ErrOtherPolicy},
		{"nothing", v1, nil, ErrInvalid},
	}
	for _, c := range cases {
		err := Supersedes(c.cur, c.next)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestSemanticScope: semantic.scope, when signed, is what the bank reads
// drift against; absent, the capability's allow list is.
func TestSemanticScope(t *testing.T) {
	ops := newSigner(t, "ops")
	keys := Keys{"ops": ops.pub}
	d := exampleDoc()
	p, err := Verify(keys, ops.sign(t, d))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Document.SemanticScope(); !slices.Equal(got, d.Capability.Allow) {
		t.Fatalf("scope without semantic.scope: %v, want the allow list %v", got, d.Capability.Allow)
	}
	d.Semantic.Scope = []string{"src/**"}
	if p, err = Verify(keys, ops.sign(t, d)); err != nil {
		t.Fatal(err)
	}
	if got := p.Document.SemanticScope(); !slices.Equal(got, []string{"src/**"}) {
		t.Fatalf("scope %v", got)
	}
}
