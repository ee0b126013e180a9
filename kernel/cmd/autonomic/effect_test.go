package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/server"
	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
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

// TestApproveThroughTheKernel: `effect approve EFFECT` against a running
// kernel reads the effect, signs its current revision and has the kernel
// record the decision; the effect is then ready for the worker's commit.
// A key the kernel does not know is refused with its catalogue code.
func TestApproveThroughTheKernel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := awaitingKernel(t, ctx, "approve")
	st, eff, cfgPath, keyFile, strangerFile := k.st, k.eff, k.cfgPath, k.keyFile, k.strangerFile

	approve := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := effectCmd(append([]string{"approve", eff.ID.String(), "--config", cfgPath}, args...), &out, &errb); code != want {
			t.Fatalf("approve %v: exit %d (want %d): %s %s", args, code, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	if out := approve(1, "--key", strangerFile, "--key-id", "stranger"); !strings.Contains(out, "approval_invalid") {
		t.Fatalf("unknown key: %s", out)
	}
	if out := approve(1, "--key", strangerFile, "--key-id", "operator"); !strings.Contains(out, "approval_invalid") {
		t.Fatalf("wrong key: %s", out)
	}
	if e, _ := st.Effect(ctx, eff.ID); e.State != store.Evaluating {
		t.Fatalf("a refused approval moved the effect to %s", e.State)
	}
	if out := approve(0, "--key", keyFile, "--key-id", "operator"); !strings.Contains(out, "allow recorded") || !strings.Contains(out, "now ready") {
		t.Fatalf("approve: %s", out)
	}
	if e, _ := st.Effect(ctx, eff.ID); e.State != store.Ready {
		t.Fatalf("after approval: %s", e.State)
	}
	// The same approval again is answered from its resolved Action and
	// records nothing; a different answer after it is refused.
	if out := approve(0, "--key", keyFile, "--key-id", "operator"); !strings.Contains(out, "now ready") {
		t.Fatalf("second approval: %s", out)
	}
	// The fixture's semantic decision and one human decision.
	if ds, _ := st.Decisions(ctx, eff.ID); len(ds) != 2 {
		t.Fatalf("%d decisions after a replayed approval, want 2", len(ds))
	}
	if out := approve(1, "--key", keyFile, "--key-id", "operator", "--decision", "deny"); !strings.Contains(out, "illegal_transition") {
		t.Fatalf("a deny after the approval: %s", out)
	}
}

// approvalKernel is a running kernel with decision key "operator" and one
// class 4 effect awaiting its approval (made here, its episode's
// ownership released for the kernel to take).
type approvalKernel struct {
	st                    *store.Postgres
	eff                   store.Effect
	cfgPath               string
	keyFile, strangerFile string
}

func awaitingKernel(t *testing.T, ctx context.Context, db string) approvalKernel {
	t.Helper()
	dir := t.TempDir()
	keyFile, strangerFile := filepath.Join(dir, "operator.pem"), filepath.Join(dir, "stranger.pem")
	var pub, errb bytes.Buffer
	if code := effectCmd([]string{"keygen", "--out", keyFile}, &pub, &errb); code != 0 {
		t.Fatal(errb.String())
	}
	if code := effectCmd([]string{"keygen", "--out", strangerFile}, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatal(errb.String())
	}
	// One instance id for the kernel and this test's store handle: the
	// effect is made here, its lease released, and the kernel takes the
	// episode's lease when it records the approval (the lease names the
	// process, so one instance id alone would not let it).
	instance := db + "-test"
	k := servertest.New(t, db, map[string]any{
		"store":         map[string]any{"instance_id": instance},
		"targets":       map[string]any{"artifact": map[string]any{"releases": map[string]any{"dir": t.TempDir()}}},
		"decision_keys": map[string]string{"operator": strings.TrimSpace(pub.String())},
	})
	stop, err := server.Start(ctx, k.Config, hclog.NewNullLogger(), server.Hooks{})
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() { _ = stop() })
	st, err := store.Open(ctx, store.Config{URL: k.Cluster.KernelConnString(db), InstanceID: instance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ep, err := st.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"origin_intent":"x"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := st.GrantLease(ctx, store.LeaseGrant{EpisodeID: ep.ID, Epoch: 1, TTL: time.Hour,
		Capabilities: []byte(`{"effects":[{"kind":"artifact","target_id":"releases","max_class":4}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	eff, err := st.ProposeEffect(ctx, store.Proposal{EpisodeID: ep.ID, Epoch: 1, LeaseID: lease.ID, Kind: "artifact", Class: 4,
		TargetID: "releases", Target: []byte(`{"name":"v1.tar"}`), PayloadDigest: "sha256:" + strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PrepareEffect(ctx, store.Prepare{EffectID: eff.ID, Revision: 1, Epoch: 1, TrajectoryVersion: 1, TrajectoryRegime: "stable"}); err != nil {
		t.Fatal(err)
	}
	if eff, err = st.Transition(ctx, store.Transition{EffectID: eff.ID, Revision: 1, Epoch: 1, To: store.Evaluating}); err != nil {
		t.Fatal(err)
	}
	// The slow loop's reading of it, which action show gives as evidence;
	// a reason carrying an escape sequence, as a worker's text might.
	sem := `{"decider":"bank","lease_denied":"","readings":[{"observations":[` +
		`{"sensor":"authority_escalation","level":"high","reason":"repeated_denials \u001b[31m"},{"sensor":"scope_drift","level":"low","reason":"in_scope"}]}]}`
	if _, err := st.RecordDecision(ctx, store.NewDecision{EffectID: eff.ID, Revision: 1, Epoch: 1, Kind: store.DecisionSemantic,
		Verdict: store.VerdictAllow, Body: []byte(sem)}); err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseOwnership(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	return approvalKernel{st: st, eff: eff, cfgPath: k.Path, keyFile: keyFile, strangerFile: strangerFile}
}

// TestActionCommands: `autonomic action list` shows the Action the class 4
// effect opened, naming its exact operation; `action show` gives the
// command; `action approve` signs exactly that operation and the effect is
// ready, with one human decision; the Action is then approved and gone
// from the open list.
func TestActionCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := awaitingKernel(t, ctx, "actions")
	cmd := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := actionCmd(append(args, "--config", k.cfgPath), &out, &errb); code != want {
			t.Fatalf("action %v: exit %d (want %d): %s %s", args, code, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	var list []api.Action
	if err := json.Unmarshal([]byte(cmd(0, "list", "--json")), &list); err != nil || len(list) != 1 {
		t.Fatalf("action list: %+v %v", list, err)
	}
	a := list[0]
	if a.Effect.ID != k.eff.ID.String() || a.Revision != k.eff.Revision || a.Digest != k.eff.PayloadDigest || a.State != "pending" {
		t.Fatalf("the action does not name the effect: %+v", a)
	}
	// show gives the evidence: why, and the decisions on that revision,
	// every text quoted (no escape sequence reaches the terminal).
	out := cmd(0, "show", a.ID)
	for _, want := range []string{"autonomic action approve " + a.ID, `why: "a class 4 effect awaits a human approval"`,
		`semantic: allow (decided by "bank")`, `sensor "authority_escalation": "high", "repeated_denials \x1b[31m"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("action show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "scope_drift") {
		t.Fatalf("action show printed an escape or a low reading:\n%s", out)
	}
	if out := cmd(1, "approve", a.ID, "--key", k.strangerFile, "--key-id", "operator"); !strings.Contains(out, "approval_invalid") {
		t.Fatalf("wrong key: %s", out)
	}
	if out := cmd(0, "approve", a.ID, "--key", k.keyFile, "--key-id", "operator"); !strings.Contains(out, "approved") {
		t.Fatalf("approve: %s", out)
	}
	if e, _ := k.st.Effect(ctx, k.eff.ID); e.State != store.Ready {
		t.Fatalf("after approval: %s", e.State)
	}
	// The fixture's semantic decision and one human decision.
	if ds, _ := k.st.Decisions(ctx, k.eff.ID); len(ds) != 2 {
		t.Fatalf("%d decisions", len(ds))
	}
	if out := cmd(0, "list"); strings.Contains(out, a.ID) {
		t.Fatalf("the approved action is still open:\n%s", out)
	}
	if out := cmd(1, "dismiss", a.ID, "--feedback", "wrong_call"); !strings.Contains(out, "illegal_transition") {
		t.Fatalf("dismissing an approved action: %s", out)
	}
}
