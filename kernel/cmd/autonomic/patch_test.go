package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/server"
	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestDeniedRunKeepsItsPatch: a run whose change did not land (its
// git_commit effect refused) keeps its work: `autonomic episode patch ID`
// prints the exact patch the effect proposed, from the kernel's payload
// store through the operator API; an episode with no git_commit says so.
func TestDeniedRunKeepsItsPatch(t *testing.T) {
	k := servertest.New(t, "patch", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop, err := server.Start(ctx, k.Config, hclog.NewNullLogger(), server.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	patch := []byte("diff --git a/src/calc.sh b/src/calc.sh\n--- a/src/calc.sh\n+++ b/src/calc.sh\n@@ -1 +1 @@\n-echo $(($1 + $2 + 1))\n+echo $(($1 + $2))\n")
	payloads, err := broker.OpenPayloads(filepath.Join(k.Config.StateDir, server.PayloadsDirName))
	if err != nil {
		t.Fatal(err)
	}
	digest, err := payloads.Put(patch)
	if err != nil {
		t.Fatal(err)
	}
	st, ep, eff := servertest.SeedEffectWith(t, ctx, k.Cluster.KernelConnString(k.DB), digest, `{"ref":"refs/heads/agent/codex"}`)
	if _, err := st.Transition(ctx, store.Transition{EffectID: eff.ID, Revision: eff.Revision, Epoch: 1, To: store.Aborted,
		Reason: "denied: the test's verdict"}); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := episodeCmd([]string{"patch", ep.ID.String(), "--config", k.Path}, &out, &errb); code != 0 || !bytes.Equal(out.Bytes(), patch) {
		t.Fatalf("episode patch: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), eff.ID.String()) {
		t.Errorf("the effect is not named: %q", errb.String())
	}
	// An episode that proposed no git_commit has no patch.
	other, err := st.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"origin_intent":"y"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := episodeCmd([]string{"patch", other.ID.String(), "--config", k.Path}, &out, &errb); code != 1 || out.Len() != 0 {
		t.Fatalf("an episode without a git_commit: exit %d, %q %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := episodeCmd([]string{"patch", uuid.NewString(), "--config", k.Path}, &out, &errb); code == 0 {
		t.Fatal("an unknown episode printed a patch")
	}
}
