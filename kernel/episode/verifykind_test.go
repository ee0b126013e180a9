package episode_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
)

// kindsWorker proposes, evaluates and commits one effect of each kind
// without tests: an http_mutation, a git_remote push of the commit in
// $PROBE, and a class 4 artifact, whose commit it retries while the
// effect awaits its human approval.
const kindsWorker = `
set -u
E=` + effectClient + `
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
step() {
  kind=$1; shift
  p=$($E prepare -kind "$kind" "$@") || { echo "PREPARE-FAILED $kind $p"; exit 1; }
  id=$(pick "$p" id); rev=$(pick "$p" revision)
  echo "EFFECT $kind $id"
  $E evaluate -effect "$id" -revision "$rev" >/dev/null || { echo "EVALUATE-REFUSED $kind"; exit 1; }
  for i in $(seq 600); do
    if c=$($E commit -effect "$id" -revision "$rev" 2>&1); then echo "COMMITTED $kind"; return; fi
    case $c in *approval_required*) [ "$i" = 1 ] && echo "AWAITS-APPROVAL $kind" ;; *) echo "COMMIT-REFUSED $kind $c"; exit 1 ;; esac
    sleep 0.1
  done
  echo "NEVER-APPROVED $kind"; exit 1
}
printf '{"n":1}' > /tmp/body
step http_mutation -target-id api -target '{"method":"POST","path":"/items","content_type":"application/json"}' -payload /tmp/body
old=${PROBE%%:*}; new=${PROBE##*:}
step git_remote -target-id pub -target "{\"ref\":\"refs/heads/main\",\"oid\":\"$new\",\"expected_remote_oid\":\"$old\"}"
printf 'v1' > /tmp/artifact
step artifact -target-id releases -target '{"name":"v1.bin"}' -payload /tmp/artifact
echo DONE
`

// TestVerificationPerKindOnTheProductionPath: the kinds automatic
// verification passes by configuration (unverified_kinds) commit through
// the kernel's own governor — its verifier, the rule bank, Decide and the
// commit horizon — from a real worker: an http_mutation and a git_remote
// push (class 3), and a class 4 artifact once an operator approved its
// exact revision: the bank reads their evidence as exempt, not missing,
// and a class 4 effect's irreversibility as medium, which the fixture
// policy's max_risk of 0.5 accepts. Until the approval, the artifact stays
// evaluating and its episode parked.
func TestVerificationPerKindOnTheProductionPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == "POST" && r.URL.Path == "/items":
			posts++
			w.WriteHeader(201)
		case r.Method == "GET" && r.URL.Path == "/idempotency":
			w.WriteHeader(404)
		default:
			w.WriteHeader(400)
		}
	}))
	defer srv.Close()
	_, opKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := t.TempDir()
	var remote, old, next string
	kinds := []string{"http_mutation", "git_remote", "artifact"}
	r := newRig(t, ctx, "verify_kinds", withVerification(verifyArgv...),
		withGovernor(func(gc *governor.Config) { gc.Verification.Unverified = kinds }),
		withBroker(func(r *rig, bc *broker.Config) {
			if remote == "" {
				// The published remote is at the base; the authoritative
				// main is one commit ahead of it.
				remote = filepath.Join(t.TempDir(), "pub.git")
				testbed.Git(t, "", "clone", "-q", "--bare", r.repo, remote)
				old = r.base
				next = testbed.Git(t, r.repo, "commit-tree", "-p", r.base, "-m", "next", r.base+"^{tree}")
				testbed.Git(t, r.repo, "update-ref", "refs/heads/main", next, r.base)
			}
			bc.Adapters = append(bc.Adapters,
				r.gov.Wrap(&broker.HTTP{Mutation: true, Payloads: r.payloads, Targets: map[string]broker.HTTPTarget{"api": {BaseURL: srv.URL,
					Methods: []string{"POST"}, Paths: []string{"items"}, AllowedNets: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
					Timeout: 5 * time.Second, ReconcilePath: "/idempotency"}}}),
				r.gov.Wrap(&broker.GitRemote{Targets: map[string]broker.GitRemoteTarget{"pub": {Repo: r.repo, URL: remote,
					AllowedRefs: []string{"refs/heads/main"}}}}),
				r.gov.Wrap(&broker.Artifact{Targets: map[string]broker.ArtifactTarget{"releases": {Dir: pub}}}))
			bc.DecisionKeys = map[string]ed25519.PublicKey{"operator": opKey.Public().(ed25519.PublicKey)}
		}))
	grant := authority.Spec{MaxClass: 4, Grants: []authority.Grant{{Target: "api", Kind: "http_mutation", MaxClass: 3},
		{Target: "pub", Kind: "git_remote", MaxClass: 3}, {Target: "releases", Kind: "artifact", MaxClass: 4}},
		Allow: []string{"**"}, Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 24, EffectsPerMinute: 60}}
	spec := r.spec(map[string]string{"PROBE": old + ":" + next})
	spec.Argv = []string{"/bin/bash", "-c", kindsWorker}
	spec.Policy, spec.Envelope, spec.Repair = signPolicy(grant), grant, nil
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}

	// The operator approves the artifact a second after it came to await
	// approval: until then it stays evaluating, its episode parked.
	approved := make(chan error, 1)
	var waited store.Effect
	var parked bool
	actx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		approved <- func() error {
			for actx.Err() == nil {
				effs, err := r.st.ListEffects(actx, e.ID(), 100)
				if err != nil {
					return err
				}
				for _, f := range effs {
					if f.Kind == "artifact" && f.State == store.Evaluating {
						time.Sleep(time.Second)
						if waited, err = r.st.Effect(actx, f.ID); err != nil {
							return err
						}
						parked = e.Status().Parked
						a, err := broker.SignApproval(opKey, "operator", broker.ApprovalFor(f, store.VerdictAllow))
						if err != nil {
							return err
						}
						_, err = r.b.Approve(actx, f.ID, a)
						return err
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			return nil // the worker ended first: its output says why
		}()
	}()
	x := nextExit(t, ctx, e)
	stop()
	out := string(x.Output)
	t.Logf("worker:\n%s", out)
	if err := <-approved; err != nil {
		t.Fatalf("approval: %v", err)
	}
	for _, k := range kinds {
		if !strings.Contains(out, "COMMITTED "+k) {
			for _, d := range semanticOf(t, ctx, r.st, e.ID()) {
				t.Logf("semantic decision: %s", d)
			}
			t.Fatalf("%s did not commit through the production governor", k)
		}
	}
	if waited.State != store.Evaluating || !parked {
		t.Errorf("a second before its approval the artifact was %s (parked: %v), want evaluating, its episode parked", waited.State, parked)
	}
	mu.Lock()
	if posts != 1 {
		t.Errorf("%d POSTs reached the API, want 1", posts)
	}
	mu.Unlock()
	if got := testbed.Git(t, remote, "rev-parse", "refs/heads/main"); got != next {
		t.Errorf("remote main %s, want the pushed %s", got, next)
	}
	if b, err := os.ReadFile(filepath.Join(pub, "v1.bin")); err != nil || string(b) != "v1" {
		t.Errorf("artifact: %q %v", b, err)
	}
	// Each effect carries the semantic decision that allowed it, and the
	// bank read its evidence as exempt, not as missing.
	ds := semanticOf(t, ctx, r.st, e.ID())
	if len(ds) != len(kinds) {
		t.Fatalf("%d semantic decisions for %d effects", len(ds), len(kinds))
	}
	for _, d := range ds {
		if !strings.Contains(d, `"verdict":"allow"`) || !strings.Contains(d, "rule:exempt_from_verification") {
			t.Errorf("semantic decision: %s", d)
		}
	}
	r.end(t, ctx, e, episode.Completed, "kinds committed")
}

// semanticOf are the episode's semantic decisions, each as
// {"kind":…,"verdict":…,"body":…}.
func semanticOf(t *testing.T, ctx context.Context, st *store.Postgres, id uuid.UUID) []string {
	t.Helper()
	effs, err := st.ListEffects(ctx, id, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range effs {
		ds, err := st.Decisions(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Kind == store.DecisionSemantic {
				b, _ := json.Marshal(map[string]any{"kind": f.Kind, "verdict": d.Verdict, "body": d.Body})
				out = append(out, string(b))
			}
		}
	}
	return out
}
