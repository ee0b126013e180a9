package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/autonomic-kernel/autonomic/kernel/policy"
)

// operatorKey is the operator's own policy-signing key: made on first use
// (mode 0600 in a 0700 directory), never read by the kernel, which knows
// only its public half under the id keyID.
type operatorKey struct {
	path  string
	priv  ed25519.PrivateKey
	keyID string
	pub   string // standard base64, as policy_keys holds it
	made  bool
}

// defaultKeyPath is $AUTONOMIC_OPERATOR_KEY, else the user's config
// directory's autonomic/operator.pem.
func defaultKeyPath() (string, error) {
	if p := os.Getenv("AUTONOMIC_OPERATOR_KEY"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory for the operator key (set AUTONOMIC_OPERATOR_KEY): %w", err)
	}
	return filepath.Join(dir, "autonomic", "operator.pem"), nil
}

// loadOrMakeKey reads the key at path, or makes it there if nothing is.
// The file is created O_EXCL, so two first uses cannot both win and a
// planted symlink is never followed into writing a key elsewhere.
func loadOrMakeKey(path string) (*operatorKey, error) {
	k := &operatorKey{path: path}
	priv, err := policy.LoadPrivateKey(path)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		_, priv, err = ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		if err := errors.Join(pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}), f.Close()); err != nil {
			os.Remove(path)
			return nil, err
		}
		k.made = true
	default:
		return nil, err
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %o lets others read the operator key; chmod 0600 it", path, st.Mode().Perm())
	}
	pub := priv.Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	k.priv, k.pub = priv, base64.StdEncoding.EncodeToString(pub)
	k.keyID = "operator-" + hex.EncodeToString(sum[:4])
	return k, nil
}

// registered reports whether the kernel's policy_keys holds this key's
// public half under its id.
func (k *operatorKey) registered(keys map[string]string) bool { return keys[k.keyID] == k.pub }
