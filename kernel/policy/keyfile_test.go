package policy

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

// TestLoadPrivateKey: the keygen format loads; anything else — not PEM,
// another PEM type, a key of another algorithm, a missing file — is
// refused.
func TestLoadPrivateKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ed)
	good := write("good.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if k, err := LoadPrivateKey(good); err != nil || !k.Equal(ed) {
		t.Fatalf("keygen's format: %v", err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	for name, b := range map[string][]byte{
		"not-pem":   []byte("ed25519 please"),
		"wrong-pem": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}),
		"garbage":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}),
		"ecdsa":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}),
	} {
		if _, err := LoadPrivateKey(write(name, b)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	if _, err := LoadPrivateKey(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file loaded")
	}
}
