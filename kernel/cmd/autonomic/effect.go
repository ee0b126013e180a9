package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// effectCmd holds the operator's effect tools that need no running kernel:
// key generation and signing a class 4 approval bound to one exact effect.
func effectCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "keygen":
		return effectKeygen(args[1:], stdout, stderr)
	case "approve":
		return effectApprove(args[1:], stdout, stderr)
	case "list", "show":
		return effectOperator(args, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return 2
}

// effectKeygen writes a new Ed25519 private key (PKCS#8 PEM, mode 0600) and
// prints its public key as decision_keys expects it (base64).
func effectKeygen(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("effect keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "private key file to create (must not exist)")
	if fs.Parse(args) != nil || *out == "" {
		return 2
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic:", err)
		return 1
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic:", err)
		return 1
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic:", err)
		return 1
	}
	if err := errors.Join(pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}), f.Close()); err != nil {
		fmt.Fprintln(stderr, "autonomic:", err)
		return 1
	}
	fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(pub))
	return 0
}

func loadKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PKCS#8 PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.New("not an Ed25519 key")
	}
	return priv, nil
}

// effectApprove signs "autonomic.human-approval.v1\n" + the RFC 8785 JSON of
// exactly one effect revision in one epoch with one payload digest; the
// signature applies to nothing else. The result is the approval JSON the
// worker passes to `autonomic-effect evaluate -approval FILE`.
func effectApprove(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("effect approve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keyFile := fs.String("key", "", "Ed25519 private key (PKCS#8 PEM)")
	keyID := fs.String("key-id", "", "the key's id in decision_keys")
	doc := protocol.ApprovalDocument{}
	fs.StringVar(&doc.EffectID, "effect", "", "effect id")
	fs.IntVar(&doc.EffectRevision, "revision", 0, "effect revision")
	fs.StringVar(&doc.EpisodeID, "episode", "", "episode id")
	fs.Int64Var(&doc.Epoch, "epoch", 0, "epoch the effect was prepared under")
	fs.StringVar(&doc.PayloadDigest, "payload-digest", "", "the effect's payload digest (sha256:...)")
	fs.StringVar(&doc.Decision, "decision", "allow", "allow or deny")
	if fs.Parse(args) != nil || *keyFile == "" || *keyID == "" {
		fmt.Fprintln(stderr, "usage: autonomic effect approve --key FILE --key-id ID --effect ID --revision N --episode ID --epoch N --payload-digest sha256:... [--decision allow|deny]")
		return 2
	}
	key, err := loadKey(*keyFile)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic: key:", err)
		return 1
	}
	a, err := broker.SignApproval(key, *keyID, doc)
	if err == nil {
		err = a.Validate()
	}
	if err != nil {
		return fail(stderr, err)
	}
	b, _ := json.MarshalIndent(a, "", "  ")
	fmt.Fprintln(stdout, string(b))
	return 0
}
