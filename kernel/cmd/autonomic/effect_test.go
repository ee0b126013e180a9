package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestApproveSignsExactlyOneRevision: keygen, then approve; the signature
// verifies over the documented message for that exact effect and fails for
// any other revision, epoch or digest.
func TestApproveSignsExactlyOneRevision(t *testing.T) {
	key := filepath.Join(t.TempDir(), "operator.pem")
	var out, errb bytes.Buffer
	if code := effectCmd([]string{"keygen", "--out", key}, &out, &errb); code != 0 {
		t.Fatalf("keygen: %d %s", code, errb.String())
	}
	pub, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out.String()))
	if err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("keygen printed %q", out.String())
	}
	if code := effectCmd([]string{"keygen", "--out", key}, &out, &errb); code == 0 {
		t.Fatal("keygen overwrote an existing key")
	}
	out.Reset()
	digest := "sha256:" + strings.Repeat("ab", 32)
	args := []string{"approve", "--key", key, "--key-id", "operator", "--effect", "01a22a55-7f78-7349-b951-19efbdb16b0b",
		"--revision", "2", "--episode", "01a22a55-7f5f-776d-8c24-48560700c11d", "--epoch", "3", "--payload-digest", digest}
	if code := effectCmd(args, &out, &errb); code != 0 {
		t.Fatalf("approve: %d %s", code, errb.String())
	}
	var a protocol.Approval
	if err := json.Unmarshal(out.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	sig, _ := base64.StdEncoding.DecodeString(a.Signature)
	verify := func(doc protocol.ApprovalDocument) bool {
		msg, err := broker.ApprovalMessage(doc)
		return err == nil && ed25519.Verify(pub, msg, sig)
	}
	if !verify(a.Document) || a.KeyID != "operator" || a.Document.Decision != "allow" {
		t.Fatalf("approval does not verify: %+v", a)
	}
	for name, mutate := range map[string]func(*protocol.ApprovalDocument){
		"revision": func(d *protocol.ApprovalDocument) { d.EffectRevision++ },
		"epoch":    func(d *protocol.ApprovalDocument) { d.Epoch++ },
		"digest":   func(d *protocol.ApprovalDocument) { d.PayloadDigest = "sha256:" + strings.Repeat("cd", 32) },
		"decision": func(d *protocol.ApprovalDocument) { d.Decision = "deny" },
	} {
		d := a.Document
		mutate(&d)
		if verify(d) {
			t.Errorf("the signature also applies to another %s", name)
		}
	}
}

func TestRefusesRoot(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"preflight"}, &out, &errb)
	if isRoot() && (code != 2 || !strings.Contains(errb.String(), "refusing to run as root")) {
		t.Fatalf("as root: %d %q", code, errb.String())
	}
}
