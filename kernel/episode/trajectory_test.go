package episode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/kernel/verify"
	"github.com/autonomic-kernel/autonomic/store"
)

// trajectoryWorker makes the change $PROBE names in /workspace, stages it
// (new and deleted files included) and proposes it as one git_commit
// effect, revised and evaluated ATTEMPTS times; then it proposes CALLS
// http_mutations to TARGET, committing each it may (the env allowlist
// passes only PROBE, so "NAME:ATTEMPTS:CALLS:TARGET" carries all four).
// Its git_commits never commit: the test reads the decisions.
const trajectoryWorker = `
set -u
E=` + effectClient + `
G="git -c safe.directory=* -c core.hooksPath=/dev/null -c user.name=w -c user.email=w@x"
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
cd /workspace
IFS=: read -r name attempts calls target <<< "$PROBE"
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
printf '{"n":1}' > /tmp/body
for c in $(seq 1 "$calls"); do
  p=$($E prepare -kind http_mutation -target-id "$target" -target '{"method":"POST","path":"/items","content_type":"application/json"}' -payload /tmp/body) || { echo "PREPARE-FAILED $p"; exit 1; }
  id=$(pick "$p" id); rev=$(pick "$p" revision)
  $E evaluate -effect "$id" -revision "$rev" >/dev/null || { echo "EVALUATE-REFUSED call $c"; continue; }
  # A failed commit reaches the trajectory off the commit path: give it
  # a moment before the next proposal.
  $E commit -effect "$id" -revision "$rev" >/dev/null && echo "COMMITTED call $c" || { echo "COMMIT-FAILED call $c"; sleep 1; }
done
echo DONE
`

// TestRuleSensorsRiseFromRealEpisodes is issue 12 §2 and issue 28: each
// deterministic rule sensor reaches high from what a real episode did —
// the edit the worker proposed, the verification that ran in a clean
// domain and its result, the commits its target failed — never from a
// history a test wrote by hand, and it is what refused the effect: the
// last semantic decision is decided by that rule, the episode's own lease
// refused nothing, and the effect's verification allowed it. The policy's
// max_risk is 1, so no policy narrowing outranks the rule, and its
// semantic.scope is calc.sh where a case reads scope. The bank runs with
// automatic verification off too (the sensitive case again, without it).
func TestRuleSensorsRiseFromRealEpisodes(t *testing.T) {
	big := strings.Repeat("a line the change deletes\n", 300)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	defer api.Close()
	// A target whose service is down: every commit fails at it, before
	// anything is sent (not committed, never unknown).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	cases := []struct {
		name, probe string
		unverified  bool // automatic verification off
		calls       int  // semantic decisions of http_mutations
		sensor      sensor.Name
		reason      string
	}{
		{"scope", "scope:1:0:api", false, 0, sensor.ScopeDrift, "rule:mostly_outside_scope"},
		{"sensitive", "sensitive:1:0:api", false, 0, sensor.AuthorityEscalation, "rule:sensitive_path"},
		{"sensitive without verification", "sensitive:1:0:api", true, 0, sensor.AuthorityEscalation, "rule:sensitive_path"},
		{"delete", "delete:1:0:api", false, 0, sensor.Irreversibility, "rule:large_authoritative_deletion"},
		// The fix made wrong: its verification fails (and refuses it),
		// and that failure is the evidence that refuses the API call the
		// worker makes next, which needs no test of its own.
		{"evidence", "loop:1:1:api", false, 1, sensor.EvidenceSufficiency, "rule:last_verification_failed"},
		// Three calls the target fails the same way, one after another:
		// the fourth is a loop.
		{"trajectory", "none:0:4:down", false, 4, sensor.TrajectoryRegime, "rule:failing_loop"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			rec := &recorder{}
			opts := []rigOpt{withFiles(map[string]string{"big.txt": big}), withTargetPaths("**"),
				withGovernor(func(cfg *governor.Config) {
					rec.Store = cfg.Store
					cfg.Store = rec
					if cfg.Verification != nil {
						cfg.Verification.Unverified = []string{"http_mutation"}
					}
				}),
				withBroker(func(r *rig, bc *broker.Config) {
					loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
					bc.Adapters = append(bc.Adapters, r.gov.Wrap(&broker.HTTP{Mutation: true, Payloads: r.payloads, Targets: map[string]broker.HTTPTarget{
						"api":  {BaseURL: api.URL, Methods: []string{"POST"}, Paths: []string{"items"}, AllowedNets: loopback, ReconcilePath: "/r"},
						"down": {BaseURL: down, Methods: []string{"POST"}, Paths: []string{"items"}, AllowedNets: loopback, ReconcilePath: "/r"}}}))
				})}
			if !c.unverified {
				opts = append(opts, withVerification(verifyArgv...))
			}
			r := newRig(t, ctx, "episode_rules_"+strings.Fields(c.name)[0], opts...)
			spec := r.spec(map[string]string{"PROBE": c.probe})
			spec.Argv = []string{"/bin/bash", "-c", trajectoryWorker}
			grant := grantSpec()
			grant.MaxClass = 3
			grant.Grants = append(grant.Grants, authority.Grant{Target: "api", Kind: "http_mutation", MaxClass: 3},
				authority.Grant{Target: "down", Kind: "http_mutation", MaxClass: 3})
			sem := policy.Semantic{MaxRisk: 1}
			if c.name == "scope" {
				// The task is about calc.sh; the notes are drift, which
				// the capability (every path) allows.
				sem.Scope = []string{"calc.sh"}
			}
			signed, err := policy.Sign(policyKey(), policyKeyID, policy.Document{Schema: policy.Schema, ID: "fixture", Version: 1,
				Capability: grant, Semantic: sem})
			if err != nil {
				t.Fatal(err)
			}
			spec.Policy, spec.Envelope, spec.Repair = signed, grant, nil
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
			attempts, _ := strconv.Atoi(strings.Split(c.probe, ":")[1])
			if want := attempts + c.calls; len(ds) != want {
				t.Fatalf("%d semantic decisions, want %d", len(ds), want)
			}
			for i, d := range ds {
				var got map[string]string
				for _, o := range d.Body.Readings[0].Observations {
					if o["sensor"] == string(c.sensor) {
						got = o
					}
				}
				last := i == len(ds)-1
				high := got["level"] == sensor.High.String() && got["reason"] == c.reason
				if !last {
					if high && c.calls == 0 {
						t.Fatalf("decision %d of %d: %s reads %v before the last", i+1, len(ds), c.sensor, got)
					}
					continue
				}
				// The rule rose, and it — not the lease, not the policy,
				// not the verification — refused the effect.
				if !high {
					t.Fatalf("last decision: %s reads %v, want high (%s)", c.sensor, got, c.reason)
				}
				if d.Verdict != store.VerdictDeny || d.Body.Decider != string(c.sensor)+":high" || d.Body.LeaseDenied != "" {
					t.Fatalf("last decision %s, decided by %q, lease refused %q: want a deny decided by %s:high alone",
						d.Verdict, d.Body.Decider, d.Body.LeaseDenied, c.sensor)
				}
				vs, err := r.st.Decisions(ctx, d.EffectID)
				if err != nil {
					t.Fatal(err)
				}
				verified := false
				for _, v := range vs {
					var b verify.Body
					if v.Kind == store.DecisionVerification && v.Revision == d.Revision && v.Verdict == store.VerdictAllow &&
						json.Unmarshal(v.Body, &b) == nil && (b.Rule == verify.RuleOff) == c.unverified {
						verified = true
					}
				}
				if !verified {
					t.Fatalf("the refused effect's verification did not allow it (automatic verification off: %v): %+v", c.unverified, vs)
				}
			}
			if c.name == "trajectory" {
				for i := 1; i <= 3; i++ {
					if !strings.Contains(out, fmt.Sprintf("COMMIT-FAILED call %d", i)) {
						t.Fatalf("call %d did not fail at its target:\n%s", i, out)
					}
				}
			}
			r.end(t, ctx, e, episode.Aborted, "rules read")
		})
	}
}
