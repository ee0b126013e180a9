package episode_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/store"
)

// trajectoryWorker makes the change $PROBE names in /workspace, stages it
// (new and deleted files included) and proposes it as one git_commit
// effect, revised and evaluated $ATTEMPTS times (the env allowlist passes
// only PROBE, so "NAME:N" carries both). It never commits: the test reads
// the decisions.
const trajectoryWorker = `
set -u
E=` + effectClient + `
G="git -c safe.directory=* -c core.hooksPath=/dev/null -c user.name=w -c user.email=w@x"
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
cd /workspace
name=${PROBE%%:*}; attempts=${PROBE##*:}
sed -i 's/1+1+1/1+1/' calc.sh
case $name in
  scope) echo one > notes-a.txt; echo two > notes-b.txt ;;
  sensitive) printf 'all:\n\tsh test.sh\n' > Makefile ;;
  delete) rm big.txt ;;
  loop) sed -i 's/1+1/1+2/' calc.sh ;;
esac
$G add -A && $G diff --cached --binary > /tmp/change.patch || { echo DIFF-FAILED; exit 1; }
T="{\"base_oid\":\"$($G rev-parse HEAD)\",\"ref\":\"refs/heads/main\",\"message\":\"change\"}"
id=""; rev=0
for a in $(seq 1 "$attempts"); do
  if [ -z "$id" ]; then
    p=$($E prepare -kind git_commit -target-id repo -target "$T" -payload /tmp/change.patch) || { echo "PREPARE-FAILED $p"; exit 1; }
  else
    p=$($E prepare -effect "$id" -revision "$rev" -kind git_commit -target-id repo -target "$T" -payload /tmp/change.patch) || { echo "REVISE-FAILED $p"; exit 1; }
  fi
  id=$(pick "$p" id); rev=$(pick "$p" revision)
  $E evaluate -effect "$id" -revision "$rev" >/dev/null || { echo "EVALUATE-REFUSED $a"; continue; }
  $E commit -effect "$id" -revision "$rev" >/dev/null && echo "COMMITTED $a" || echo "COMMIT-REFUSED $a"
done
echo DONE
`

// TestRuleSensorsRiseFromRealEpisodes is issue 12 §2: each deterministic
// rule sensor reaches high from what a real episode did — the edit the
// worker proposed, the verification that ran in a clean domain and its
// result — never from a history a test wrote by hand. Each case's last
// semantic decision is read back from the store, and the rule that rose
// must have denied it.
func TestRuleSensorsRiseFromRealEpisodes(t *testing.T) {
	big := strings.Repeat("a line the change deletes\n", 300)
	cases := []struct {
		probe    string
		attempts int
		sensor   sensor.Name
		reason   string
	}{
		{"scope", 1, sensor.ScopeDrift, "rule:mostly_outside_scope"},
		{"sensitive", 1, sensor.AuthorityEscalation, "rule:sensitive_path"},
		{"delete", 1, sensor.Irreversibility, "rule:large_authoritative_deletion"},
		// The fix made wrong, three times: the verification's failure is
		// evidence for the decision it belongs to, and the third time the
		// same failure is a loop.
		{"loop", 1, sensor.EvidenceSufficiency, "rule:last_verification_failed"},
		{"loop", 3, sensor.TrajectoryRegime, "rule:failing_loop"},
	}
	for _, c := range cases {
		t.Run(string(c.sensor), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			rec := &recorder{}
			r := newRig(t, ctx, "episode_rules_"+c.probe, withVerification(verifyArgv...),
				withFiles(map[string]string{"big.txt": big}), withTargetPaths("**"),
				withGovernor(func(cfg *governor.Config) { rec.Store = cfg.Store; cfg.Store = rec }))
			spec := r.spec(map[string]string{"PROBE": c.probe + ":" + strconv.Itoa(c.attempts)})
			spec.Argv = []string{"/bin/bash", "-c", trajectoryWorker}
			if c.probe == "scope" {
				// The intent is about calc.sh; the notes are drift.
				grant := grantSpec()
				grant.Allow = []string{"calc.sh"}
				spec.Policy, spec.Envelope = signPolicy(grant), grant
			}
			e, err := r.k.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			x := nextExit(t, ctx, e)
			out := string(x.Output)
			if !strings.Contains(out, "DONE") || strings.Contains(out, "COMMITTED") {
				t.Fatalf("worker (nothing may commit): %+v\n%s", x.Exited, out)
			}
			if got := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); got != r.base {
				t.Fatalf("authoritative main moved to %s", got)
			}
			ds := rec.semanticDecisions(t, ctx, r.st, e.ID())
			if len(ds) != c.attempts {
				t.Fatalf("%d semantic decisions for %d evaluations", len(ds), c.attempts)
			}
			for i, d := range ds {
				rules := d.Body.Readings[0]
				var got map[string]string
				for _, o := range rules.Observations {
					if o["sensor"] == string(c.sensor) {
						got = o
					}
				}
				last := i == len(ds)-1
				high := got["level"] == sensor.High.String() && got["reason"] == c.reason
				if last && !high || !last && high {
					t.Fatalf("decision %d of %d: %s reads %v, want high (%s) only on the last", i+1, len(ds), c.sensor, got, c.reason)
				}
				if d.Verdict != store.VerdictDeny {
					t.Fatalf("decision %d allowed: %+v", i+1, d)
				}
			}
			r.end(t, ctx, e, episode.Aborted, "rules read")
		})
	}
}
