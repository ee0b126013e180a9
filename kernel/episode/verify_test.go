package episode_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/store"
)

// verifyArgv is the target's trusted verify_argv: the fixture's own test.
var verifyArgv = []string{"/bin/sh", "-c", "sh test.sh"}

type decision struct {
	EffectID uuid.UUID `json:"effect_id"`
	Revision int       `json:"revision"`
	Epoch    int64     `json:"decision_epoch"`
	Kind     string    `json:"kind"`
	Verdict  string    `json:"verdict"`
}

func decisions(t *testing.T, ctx context.Context, st store.Store, ep uuid.UUID) []decision {
	t.Helper()
	evs, err := st.Events(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	var out []decision
	for _, ev := range evs {
		if ev.Kind == "decision_recorded" {
			var d decision
			if err := json.Unmarshal(ev.Body, &d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

// verificationsGone checks that every verification domain the kernel ran
// is destroyed (inspect finds nothing) and its clone removed.
func verificationsGone(t *testing.T, ctx context.Context, r *rig) {
	t.Helper()
	ran := r.dom.created("verify-")
	if len(ran) == 0 {
		t.Fatal("no verification domain ran")
	}
	for id := range ran {
		if st, err := shared.bed.Domains().Inspect(ctx, id); err != nil || st.Exists || st.Populated || st.Processes != 0 {
			t.Errorf("verification domain %s after verify: %+v, %v", id, st, err)
		}
		if _, err := os.Stat(filepath.Join(shared.bed.Workspaces, id)); !os.IsNotExist(err) {
			t.Errorf("verification workspace %s still exists: %v", id, err)
		}
	}
}

var effectLine = regexp.MustCompile(`EFFECT=([0-9a-f-]{36})`)

// TestVerificationAllowsAndCommits: with automatic verification on, the
// worker's fixing patch is replayed on the exact base in a clean one-shot
// domain, the fixture's test passes there, the allow decision is bound to
// the effect's revision and epoch, and the commit lands; the verification
// domain is proven gone.
func TestVerificationAllowsAndCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newRig(t, ctx, "episode_verify_allow", withVerification(verifyArgv...))
	e, err := r.k.Start(ctx, r.spec(nil))
	if err != nil {
		t.Fatal(err)
	}
	x := nextExit(t, ctx, e)
	out := string(x.Output)
	if x.Exited.ExitCode == nil || *x.Exited.ExitCode != 0 || !strings.Contains(out, "STATE=committed") {
		t.Fatalf("worker did not commit: %+v\n%s", x.Exited, out)
	}
	m := effectLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no effect id in worker output:\n%s", out)
	}
	eff, err := r.st.Effect(ctx, uuid.MustParse(m[1]))
	if err != nil || eff.State != store.Committed {
		t.Fatalf("effect: %+v, %v", eff.State, err)
	}
	// The slow loop records the semantic decision (rules only here) inside
	// the verifier, then the broker records the verification's.
	ds := decisions(t, ctx, r.st, e.ID())
	if len(ds) != 2 || ds[0].Kind != store.DecisionSemantic || ds[1].Kind != store.DecisionVerification {
		t.Fatalf("decisions %+v", ds)
	}
	for _, d := range ds {
		if d.Verdict != store.VerdictAllow || d.EffectID != eff.ID || d.Revision != eff.Revision || d.Epoch != eff.Epoch {
			t.Fatalf("decisions %+v for effect %s revision %d epoch %d", ds, eff.ID, eff.Revision, eff.Epoch)
		}
	}
	msg := headMessage(t, r.repo)
	if !strings.Contains(msg, broker.TrailerKey+": "+eff.ID.String()) || testbed.Git(t, r.repo, "rev-parse", "refs/heads/main^") != r.base {
		t.Fatalf("authoritative head:\n%s", msg)
	}
	verificationsGone(t, ctx, r)
	r.end(t, ctx, e, episode.Completed, "verified and committed")
}

// TestVerificationDeniesBrokenPatch: a patch that breaks the fixture's
// test (proposed without running it) fails verify_argv in the clean
// domain; the deny decision is recorded against its revision and epoch,
// evaluation refuses it, and the authoritative repository never moves.
func TestVerificationDeniesBrokenPatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newRig(t, ctx, "episode_verify_deny", withVerification(verifyArgv...))
	e, err := r.k.Start(ctx, r.spec(map[string]string{"PROBE": "break"}))
	if err != nil {
		t.Fatal(err)
	}
	x := nextExit(t, ctx, e)
	out := string(x.Output)
	if !strings.Contains(out, "BROKE") || !strings.Contains(out, "EVALUATE-FAILED") || strings.Contains(out, "STATE=") {
		t.Fatalf("worker: %+v\n%s", x.Exited, out)
	}
	m := effectLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no effect id in worker output:\n%s", out)
	}
	eff, err := r.st.Effect(ctx, uuid.MustParse(m[1]))
	if err != nil || eff.State == store.Committed || eff.State == store.CommitIntent || eff.State == store.Committing {
		t.Fatalf("denied effect: %+v, %v", eff.State, err)
	}
	// The bank reads the failed verification as evidence and denies too;
	// then the broker records the verification's deny.
	ds := decisions(t, ctx, r.st, e.ID())
	if len(ds) != 2 || ds[0].Kind != store.DecisionSemantic || ds[1].Kind != store.DecisionVerification {
		t.Fatalf("decisions %+v for effect %s", ds, eff.ID)
	}
	for _, d := range ds {
		if d.Verdict != store.VerdictDeny || d.EffectID != eff.ID || d.Revision != eff.Revision || d.Epoch != eff.Epoch {
			t.Fatalf("decisions %+v for effect %s", ds, eff.ID)
		}
	}
	if got := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); got != r.base {
		t.Fatalf("authoritative main moved to %s", got)
	}
	// The broker refuses the effect at the commit horizon too, not just at
	// evaluation: a second evaluate cannot launder the deny.
	if _, err := r.b.Commit(ctx, eff, eff.Revision, eff.Epoch); err == nil {
		t.Fatal("a denied effect committed")
	}
	if got := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); got != r.base {
		t.Fatalf("authoritative main moved to %s", got)
	}
	verificationsGone(t, ctx, r)
	r.end(t, ctx, e, episode.Aborted, "verification denied")
}
