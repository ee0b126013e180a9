package episode_test

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/store"
)

// parkWorker proposes an artifact on TARGET, evaluates it, and then tries
// its commit every tenth of a second until it lands, counting the tries.
const parkWorker = `
set -u
E=` + effectClient + `
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
printf 'v1' > /tmp/artifact
p=$($E prepare -kind artifact -target-id $TARGET -target '{"name":"v1.bin"}' -payload /tmp/artifact) || { echo "PREPARE-FAILED $p"; exit 1; }
id=$(pick "$p" id); rev=$(pick "$p" revision)
$E evaluate -effect "$id" -revision "$rev" >/dev/null || { echo EVALUATE-REFUSED; exit 1; }
n=0
while :; do
  n=$((n+1))
  if c=$($E commit -effect "$id" -revision "$rev" 2>&1); then break; fi
  case $c in *approval_required*) sleep 0.1 ;; *) echo "COMMIT-REFUSED $c"; exit 1 ;; esac
done
echo "TRIES=$n"
echo COMMITTED
`

// TestEpisodeParksWhileItsActionWaits (issue 25 §2): once a worker's class
// 4 effect waits on its Action, the episode parks — its domain frozen, so
// the worker polls nothing — and resumes when the operator answers: the
// worker's first commit after the answer lands.
func TestEpisodeParksWhileItsActionWaits(t *testing.T) {
	parkAndResume(t, "releases", false)
}

// TestEffectOutsideLeaseParksItsEpisode (issue 25 §2): under
// escalate_outside_lease, a worker's proposal its lease does not grant (a
// class 3 artifact target outside it) passes the slow loop's lease
// reading with the grant lifted, waits on its Action with the episode
// parked, and lands once the operator approves it.
func TestEffectOutsideLeaseParksItsEpisode(t *testing.T) {
	parkAndResume(t, "drafts", true)
}

// parkAndResume runs parkWorker on target under a lease granting
// artifacts on "releases" (class 4) only; "drafts" is class 3.
func parkAndResume(t *testing.T, target string, escalate bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, opKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := t.TempDir()
	r := newRig(t, ctx, "episode_park", withBroker(func(r *rig, bc *broker.Config) {
		bc.Adapters = append(bc.Adapters, r.gov.Wrap(&broker.Artifact{Targets: map[string]broker.ArtifactTarget{
			"releases": {Dir: pub}, "drafts": {Dir: pub, Class: 3}}}))
		bc.DecisionKeys = map[string]ed25519.PublicKey{"operator": opKey.Public().(ed25519.PublicKey)}
		bc.EscalateOutsideLease = escalate
	}))
	grant := authority.Spec{MaxClass: 4, Grants: []authority.Grant{{Target: "releases", Kind: "artifact", MaxClass: 4}},
		Allow: []string{"**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 600}}
	spec := r.spec(nil)
	spec.Argv = []string{"/bin/bash", "-c", "TARGET=" + target + "\n" + parkWorker}
	spec.Policy, spec.Envelope, spec.Repair = signPolicy(grant), grant, nil
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// The effect waits on its Action, and the episode is parked.
	var waiting store.Effect
	for waiting.ID == [16]byte{} {
		effs, err := r.st.ListEffects(ctx, e.ID(), 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range effs {
			if f.AwaitsHuman() && f.State == store.Evaluating {
				waiting = f
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no effect came to wait on its Action")
		}
		time.Sleep(100 * time.Millisecond)
	}
	frozen := func() bool {
		st, err := r.dom.Inspect(ctx, e.Status().LauncherID)
		return err == nil && st.Frozen
	}
	for !(e.Status().Parked && frozen()) {
		if ctx.Err() != nil {
			t.Fatalf("the episode did not park: %+v", e.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // unparked, the worker would try twenty commits by now
	if !frozen() {
		t.Fatal("the domain thawed while its Action still waits")
	}
	a, err := broker.SignApproval(opKey, "operator", broker.ApprovalFor(waiting, store.VerdictAllow))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.b.Approve(ctx, waiting.ID, a); err != nil {
		t.Fatal(err)
	}
	x := nextExit(t, ctx, e)
	out := string(x.Output)
	m := regexp.MustCompile(`TRIES=(\d+)`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "COMMITTED") {
		t.Fatalf("the worker did not commit after the answer:\n%s", out)
	}
	if n, _ := strconv.Atoi(m[1]); n > 2 {
		t.Fatalf("the worker tried %d commits: it was not parked while its Action waited", n)
	}
	if e.Status().Parked {
		t.Fatal("still parked after the answer")
	}
	if b, err := os.ReadFile(filepath.Join(pub, "v1.bin")); err != nil || string(b) != "v1" {
		t.Fatalf("published %q, %v", b, err)
	}
	r.end(t, ctx, e, episode.Completed, "parked and resumed")
}
