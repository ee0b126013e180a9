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
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// effectCmd holds the operator's effect tools: key generation, a class 4
// approval bound to one exact effect revision (recorded through the running
// kernel, or signed offline), and the list|show views.
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
	case "settle":
		return effectSettle(args[1:], stdout, stderr)
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

// effectApprove signs "autonomic.human-approval.v1\n" + the RFC 8785 JSON of
// exactly one effect revision in one epoch with one payload digest; the
// signature applies to nothing else.
//
// With EFFECT_ID it reads the effect from the running kernel, signs the
// revision the kernel holds now and submits the approval; the kernel
// verifies it against decision_keys and records it, and the worker then
// commits without carrying anything. If the worker re-proposes in between,
// the kernel refuses the approval (approval_invalid): it names a revision
// that no longer stands. With --effect and the other document flags
// instead (offline), it signs that document and prints the approval JSON
// the worker passes to `autonomic-effect evaluate -approval FILE`.
func effectApprove(args []string, stdout, stderr io.Writer) int {
	o := newOpFlags("effect approve", stderr)
	fs := o.fs
	keyFile := fs.String("key", "", "Ed25519 private key (PKCS#8 PEM)")
	keyID := fs.String("key-id", "", "the key's id in decision_keys")
	doc := protocol.ApprovalDocument{}
	fs.StringVar(&doc.EffectID, "effect", "", "offline: effect id")
	fs.IntVar(&doc.EffectRevision, "revision", 0, "offline: effect revision")
	fs.StringVar(&doc.EpisodeID, "episode", "", "offline: episode id")
	fs.Int64Var(&doc.Epoch, "epoch", 0, "offline: epoch the effect was prepared under")
	fs.StringVar(&doc.PayloadDigest, "payload-digest", "", "offline: the effect's payload digest (sha256:...)")
	decision := fs.String("decision", "allow", "allow (or approve) or deny")
	pos, err := o.parse(args)
	online := len(pos) == 1 && doc.EffectID == ""
	offline := len(pos) == 0 && doc.EffectID != ""
	if err != nil || *keyFile == "" || *keyID == "" || !online && !offline {
		fmt.Fprintln(stderr, "usage: autonomic effect approve EFFECT_ID --key FILE --key-id ID [--decision allow|deny] [--config F | --socket S] [--json]\n"+
			"       autonomic effect approve --key FILE --key-id ID --effect ID --revision N --episode ID --epoch N --payload-digest sha256:... [--decision allow|deny]")
		return 2
	}
	doc.Decision = *decision
	if doc.Decision == "approve" {
		doc.Decision = "allow"
	}
	key, err := policy.LoadPrivateKey(*keyFile)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic: key:", err)
		return 1
	}
	if offline {
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
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	e, err := c.Effect(ctx, pos[0])
	if err != nil {
		return opFail(stderr, err)
	}
	doc.EffectID, doc.EffectRevision, doc.EpisodeID, doc.Epoch, doc.PayloadDigest = e.ID, e.Revision, e.EpisodeID, e.Epoch, e.PayloadDigest
	a, err := broker.SignApproval(key, *keyID, doc)
	if err == nil {
		err = a.Validate()
	}
	if err != nil {
		return fail(stderr, err)
	}
	after, err := c.Approve(ctx, e.ID, a)
	if err != nil {
		return opFail(stderr, err)
	}
	if *o.json {
		printJSON(stdout, after)
		return 0
	}
	fmt.Fprintf(stdout, "%s recorded for effect %s revision %d (%s, class %d, target %s, payload %s): now %s\n",
		doc.Decision, after.ID, doc.EffectRevision, after.Kind, after.Class, after.TargetID, doc.PayloadDigest, after.State)
	return 0
}

// effectSettle gives the running kernel an operator's word on an effect
// whose commit outcome nothing can find (commit_unknown: its target was
// removed from the configuration, or its ref moved ambiguously). The
// kernel asks the target first where it still can; only where it cannot
// is the operator's word recorded, with their uid and reason.
func effectSettle(args []string, stdout, stderr io.Writer) int {
	o := newOpFlags("effect settle", stderr)
	committed := o.fs.Bool("committed", false, "the effect did take place (you checked the target)")
	notCommitted := o.fs.Bool("not-committed", false, "the effect did not take place")
	reason := o.fs.String("reason", "", "what you checked (recorded; 1..200 bytes)")
	pos, err := o.parse(args)
	if err != nil || len(pos) != 1 || *committed == *notCommitted || *reason == "" {
		fmt.Fprintln(stderr, "usage: autonomic effect settle EFFECT --committed|--not-committed --reason TEXT [--config FILE]")
		return 2
	}
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	e, err := c.Settle(ctx, pos[0], *committed, *reason)
	if err != nil {
		return opFail(stderr, err)
	}
	if *o.json {
		printJSON(stdout, e)
		return 0
	}
	fmt.Fprintf(stdout, "effect %s is %s\n", e.ID, e.State)
	return 0
}
