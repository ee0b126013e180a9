package main

import (
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"

	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// policyCmd holds the operator's policy tool: signing needs the private
// key, which the kernel never holds, so it runs without one.
func policyCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "sign" {
		fmt.Fprint(stderr, usage)
		return 2
	}
	return policySign(args[1:], stdin, stdout, stderr)
}

// policySign reads a policy document on stdin and prints its signed
// envelope, the value of an episode spec's "policy". The key is an
// `effect keygen` key (PKCS#8 PEM); its public half goes in policy_keys
// under the same key id. The result is verified as the kernel will verify
// it, so a document the kernel would refuse is refused here.
func policySign(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("policy sign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keyFile := fs.String("key", "", "Ed25519 private key (PKCS#8 PEM, as effect keygen writes it)")
	keyID := fs.String("key-id", "", "the key's id in policy_keys")
	if fs.Parse(args) != nil || *keyFile == "" || *keyID == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: autonomic policy sign --key FILE --key-id ID < policy.json")
		return 2
	}
	key, err := policy.LoadPrivateKey(*keyFile)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic: key:", err)
		return 1
	}
	raw, err := io.ReadAll(io.LimitReader(stdin, policy.MaxSigned+1))
	if err != nil || len(raw) > policy.MaxSigned {
		return fail(stderr, protocol.E(protocol.CodeFrameTooLarge))
	}
	var doc policy.Document
	if err := protocol.DecodeStrict(raw, &doc); err != nil {
		return fail(stderr, err)
	}
	signed, err := policy.Sign(key, *keyID, doc)
	if err != nil {
		return fail(stderr, err)
	}
	pub := key.Public().(ed25519.PublicKey)
	if _, err := policy.Verify(policy.Keys{*keyID: pub}, signed); err != nil {
		fmt.Fprintln(stderr, "autonomic:", err)
		return 1
	}
	fmt.Fprintln(stdout, string(signed))
	return 0
}
