package episode_test

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/egress"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/relay"
	"github.com/autonomic-kernel/autonomic/kernel/verify"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/seccomp"
	"github.com/autonomic-kernel/autonomic/store"
)

// entryPath is where the rig's rootfs carries autonomic-entry.
const entryPath = "/usr/local/bin/autonomic-entry"

// servicesWorker calls the relay once through the loopback bridge (as an
// agent CLI does), then asks the egress proxy 12 times for a host the
// policy does not allow, then waits. Plain bash: /dev/tcp over the agent
// profile's loopback TCP.
const servicesWorker = `
set -u
body='{"model":"fixture-1","messages":[{"role":"user","content":"hi"}]}'
exec 3<>/dev/tcp/127.0.0.1/8787
printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nAuthorization: Bearer placeholder\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' ${#body} "$body" >&3
cat <&3; echo; exec 3<&-
for i in $(seq 12); do
  exec 4<>/dev/tcp/127.0.0.1/8788
  printf 'GET http://blocked.example/x HTTP/1.1\r\nHost: blocked.example\r\nConnection: close\r\n\r\n' >&4
  cat <&4 >/dev/null; exec 4<&-
done
echo HAMMERED
sleep 120
`

// TestEpisodeServesItsRelayAndEgress: a spec naming a provider, the agent
// profile and a policy granting inference and egress gets its own relay
// and egress proxy on sockets bound into the domain. The worker's one model
// call reaches the fixture provider with the kernel's key (never the
// placeholder) and lands in the relay ledger; its refused fetches land in
// the egress ledger and, as fast-loop drift, climb the homeostat to
// containment — final here (max_repairs 0) — whose reason names them. The
// sockets are gone once the episode has ended.
func TestEpisodeServesItsRelayAndEgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	model, err := fixturemodel.Start(fixturemodel.Script{Wire: fixturemodel.Chat,
		Turns: []fixturemodel.Turn{{Text: "RELAYED-ANSWER", Usage: fixturemodel.Usage{Input: 10, Output: 5}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	const keyEnv, key = "AUTONOMIC_TEST_PROVIDER_KEY", "sk-kernel-only-7d1c"
	t.Setenv(keyEnv, key)
	agentProg := agentProfile(t)
	r := newRig(t, ctx, "services", withConfig(func(c *episode.Config) {
		c.Profiles = map[string][]byte{episode.ProfileAgent: agentProg}
		c.Providers = map[string]config.Provider{"fixture": {WireAPI: config.WireChat, Upstream: model.URL, CredentialEnv: keyEnv,
			Models: []string{"fixture-1"}, Prices: map[string]config.Price{"fixture-1": {}}}}
		c.RelayLedger = c.Store.(relay.Ledger)
		c.Egress = &episode.EgressConfig{Operator: config.Egress{Allow: []string{"registry.npmjs.org"}, MaxBytesPerEpisode: 1 << 20},
			Ledger: c.Store.(egress.Ledger)}
	}))
	spec := r.spec(nil)
	grant := grantSpec()
	signed, err := policy.Sign(policyKey(), policyKeyID, policy.Document{Schema: policy.Schema, ID: "services", Version: 1,
		Capability: grant, Semantic: policy.Semantic{MaxRisk: 0.5},
		Inference: &policy.Inference{Models: []string{"fixture-1"}, MaxTokens: 100000},
		Egress:    &policy.Egress{Allow: []string{"registry.npmjs.org"}}})
	if err != nil {
		t.Fatal(err)
	}
	spec.Policy, spec.MaxRepairs = signed, 0
	spec.Seccomp, spec.Inference = episode.ProfileAgent, "fixture"
	spec.Argv = []string{entryPath, "--bridge", "127.0.0.1:8787=/run/autonomic/inference.sock",
		"--bridge", "127.0.0.1:8788=/run/autonomic/egress.sock", "--", "/bin/bash", "-c", servicesWorker}

	// What this kernel cannot give is refused before anything exists.
	for name, bad := range map[string]func(*episode.Spec){
		"unknown profile":  func(s *episode.Spec) { s.Seccomp = "worker-loopback" },
		"unknown provider": func(s *episode.Spec) { s.Inference = "elsewhere" },
		"bad rootfs":       func(s *episode.Spec) { s.Rootfs = "../agents" },
	} {
		s := spec
		bad(&s)
		if _, err := r.k.Start(ctx, s); protocol.AsWire(err).Code != protocol.CodeInvalidField {
			t.Errorf("%s: start = %v, want invalid_field", name, err)
		}
	}

	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	relaySock := shared.bed.Sockets + "/" + e.ID().String() + "-inference.sock"
	egressSock := shared.bed.Sockets + "/" + e.ID().String() + "-egress.sock"
	for _, p := range []string{relaySock, egressSock} {
		if !isSocket(p) {
			t.Errorf("%s is not bound while the episode runs", p)
		}
	}
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatalf("the hammering worker was never contained: %+v", e.Status())
	}
	st := e.Status()
	if st.State != episode.Contained || !strings.Contains(st.Why, "egress refused") {
		t.Fatalf("status = %+v, want contained for egress refusals", st)
	}

	reqs := model.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the provider saw %d requests, want the worker's one", len(reqs))
	}
	if q := reqs[0]; q.Method != "POST" || q.Path != "/v1/chat/completions" || q.Header.Get("Authorization") != "Bearer "+key {
		t.Errorf("provider saw %s %s with Authorization %q", q.Method, q.Path, q.Header.Get("Authorization"))
	}
	pg := r.st
	calls, err := pg.RelayCalls(ctx, e.ID())
	if err != nil || len(calls) != 1 || calls[0].Status != 200 || calls[0].InputTokens != 10 || calls[0].OutputTokens != 5 {
		t.Errorf("relay ledger = %+v, %v", calls, err)
	}
	fetches, err := pg.EgressFetches(ctx, e.ID())
	if err != nil || len(fetches) < 7 {
		t.Fatalf("egress ledger has %d rows (%v), want the refusals that contained it", len(fetches), err)
	}
	for _, f := range fetches {
		if f.Outcome != store.EgressRefused || f.Host != "blocked.example" {
			t.Errorf("egress row %+v, want a refusal of blocked.example", f)
		}
	}
	for _, p := range []string{relaySock, egressSock} {
		if isSocket(p) {
			t.Errorf("%s outlived the episode", p)
		}
	}
}

// saturatingWorker holds the proxy's one slot with an open tunnel (a
// CONNECT refused, say because the opening row could not be written in
// time on a loaded host, is tried again: a freed slot would send the
// requests upstream), then makes more requests than refused hosts need
// to contain an episode: each is refused effect_broker_saturated. No
// read waits unbounded, so the worker always reaches its end.
const saturatingWorker = `
for try in $(seq 10); do
  exec 5<>/dev/tcp/127.0.0.1/8788 || { sleep 1; continue; }
  printf 'CONNECT registry.npmjs.org:443 HTTP/1.1\r\nHost: registry.npmjs.org:443\r\n\r\n' >&5
  read -r -t 20 status <&5; echo "TUNNEL $status"
  case "$status" in *" 200 "*) break;; esac
  exec 5<&-; sleep 1
done
for i in $(seq 16); do
  exec 4<>/dev/tcp/127.0.0.1/8788 || continue
  printf 'GET http://registry.npmjs.org/is-number HTTP/1.1\r\nHost: registry.npmjs.org\r\nConnection: close\r\n\r\n' >&4
  timeout 10 cat <&4 >/dev/null; exec 4<&-
done
echo SATURATED
sleep 120
`

// TestSaturationIsNotDrift: requests refused because the episode's own
// fetches in flight fill its proxy (effect_broker_saturated: a tool's
// parallelism, npm ci's dozens of tunnels) are recorded, but are not
// drift on the fast loop: more of them than the refused hosts that
// contain TestEpisodeServesItsRelayAndEgress's worker leave this one
// running (before, a setup's npm ci could get its harvest denied).
func TestSaturationIsNotDrift(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const host = "registry.npmjs.org"
	r, spec := egressRig(t, ctx, "saturation", host, withConfig(func(c *episode.Config) { c.Egress.Operator.MaxConcurrent = 1 }))
	spec.MaxRepairs = 0
	spec.Argv = []string{entryPath, "--bridge", "127.0.0.1:8788=/run/autonomic/egress.sock", "--", "/bin/bash", "-c", saturatingWorker}
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var saturated int
	var fetches []store.EgressFetch
	for saturated < 10 && e.Status().State == episode.Running {
		time.Sleep(200 * time.Millisecond)
		got, err := r.st.EgressFetches(ctx, e.ID())
		if err != nil {
			t.Errorf("reading the fetches: %v", err)
			break
		}
		fetches = got
		saturated = 0
		for _, f := range fetches {
			if f.Outcome == store.EgressRefused && f.Code == string(protocol.CodeEffectBrokerSaturated) {
				saturated++
			}
		}
	}
	time.Sleep(time.Second) // the fast loop hears every refusal
	if st := e.Status(); st.State != episode.Running || saturated < 10 {
		for _, f := range fetches {
			t.Logf("fetch: %s %s %s %s %s %q", f.Kind, f.Method, f.Host, f.Outcome, f.Code, f.Reason)
		}
		t.Fatalf("after %d saturated refusals the episode is %s (%s), want still running", saturated, st.State, st.Why)
	}
	r.end(t, ctx, e, episode.Aborted, "test over")
}

func isSocket(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().Type() == os.ModeSocket
}

// budgetWorker makes one model call through the bridge, then waits.
const budgetWorker = `
body='{"model":"fixture-1","messages":[{"role":"user","content":"hi"}]}'
exec 3<>/dev/tcp/127.0.0.1/8787
printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' ${#body} "$body" >&3
cat <&3; echo; exec 3<&-
sleep 120
`

// TestRelayExhaustionNarrowsTheEpisode: a call that does not fit the
// signed policy's inference budget is refused, never forwarded, recorded in
// the ledger, and reaches the episode's homeostat as pressure on the fast
// loop: its regime leaves stable (the broker then narrows what commits).
func TestRelayExhaustionNarrowsTheEpisode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	model, err := fixturemodel.Start(fixturemodel.Script{Wire: fixturemodel.Chat, Turns: []fixturemodel.Turn{{Text: "never"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	agentProg := agentProfile(t)
	r := newRig(t, ctx, "exhaustion", withConfig(func(c *episode.Config) {
		c.Profiles = map[string][]byte{episode.ProfileAgent: agentProg}
		c.Providers = map[string]config.Provider{"fixture": {WireAPI: config.WireChat, Upstream: model.URL,
			Models: []string{"fixture-1"}, Prices: map[string]config.Price{"fixture-1": {}}, MaxOutputTokens: 1000}}
		c.RelayLedger = c.Store.(relay.Ledger)
	}))
	spec := r.spec(nil)
	signed, err := policy.Sign(policyKey(), policyKeyID, policy.Document{Schema: policy.Schema, ID: "exhaustion", Version: 1,
		Capability: grantSpec(), Semantic: policy.Semantic{MaxRisk: 0.5},
		Inference: &policy.Inference{Models: []string{"fixture-1"}, MaxTokens: 50}})
	if err != nil {
		t.Fatal(err)
	}
	spec.Policy, spec.Seccomp, spec.Inference = signed, episode.ProfileAgent, "fixture"
	spec.Argv = []string{entryPath, "--bridge", "127.0.0.1:8787=/run/autonomic/inference.sock", "--", "/bin/bash", "-c", budgetWorker}
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	regime := ""
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, regime = r.gov.Trajectory(ctx, e.ID()); regime != "stable" {
			break
		}
	}
	if regime != "uncertain" {
		t.Fatalf("regime after the exhausted budget = %q, want uncertain", regime)
	}
	if n := model.Calls(); n != 0 {
		t.Errorf("the provider saw %d calls beyond the budget", n)
	}
	events, err := r.st.Events(ctx, e.ID())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range events {
		kinds = append(kinds, ev.Kind)
	}
	if !strings.Contains(strings.Join(kinds, " "), "inference_budget_exhausted") {
		t.Errorf("the ledger lacks the exhaustion: %v", kinds)
	}
	r.end(t, ctx, e, episode.Aborted, "test over")
}

// verifyFetch is a verify_argv whose test needs a dependency: it fetches
// the is-number 7.0.0 tarball from the npm registry through the bridge
// (plain bash: /dev/tcp over the loopback the agent profile allows) and
// passes only when that succeeded and the fixture's own test passes.
const verifyFetch = `
exec 3<>/dev/tcp/127.0.0.1/8788 || { echo "NO-BRIDGE"; exit 1; }
printf 'GET http://registry.npmjs.org/is-number/-/is-number-7.0.0.tgz HTTP/1.1\r\nHost: registry.npmjs.org\r\nConnection: close\r\n\r\n' >&3
read -r status <&3
case "$status" in *" 200 "*) echo "DEPENDENCY-FETCHED" ;; *) echo "FETCH-FAILED $status"; exit 1 ;; esac
` + httpsFetch + `|| exit 1
sh test.sh
`

// httpsFetch fetches a tarball over HTTPS through the egress bridge as a
// tool does (HTTPS_PROXY, CONNECT, TLS verified against the CA bundle the
// toolchain variables name): it works only if the domain trusts the
// episode's egress CA, which terminates the tunnel.
const httpsFetch = `python3 -c '
import os, ssl, sys, urllib.request
print("CA", os.environ.get("SSL_CERT_FILE"))
h = urllib.request.ProxyHandler({"https": "http://127.0.0.1:8788"})
s = urllib.request.HTTPSHandler(context=ssl.create_default_context())
try:
    r = urllib.request.build_opener(h, s).open("https://registry.npmjs.org/is-number/-/is-number-6.0.0.tgz", timeout=60)
    print("HTTPS-FETCHED", r.status, len(r.read()))
except Exception as e:
    print("HTTPS-FAILED", e); sys.exit(1)
' `

// TestEpisodeTrustsItsEgressCA: an episode with egress hands its worker
// the certificate of the CA its proxy terminates tunnels with (never the
// key), with each toolchain's variable naming it, so an HTTPS fetch
// through CONNECT verifies, and what went inside TLS is in the episode's
// fetch ledger path by path, next to the tunnel's own row.
func TestEpisodeTrustsItsEgressCA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const host = "registry.npmjs.org"
	r, spec := egressRig(t, ctx, "egressca", host)
	spec.Argv = []string{entryPath, "--bridge", "127.0.0.1:8788=/run/autonomic/egress.sock", "--",
		"/bin/bash", "-c", httpsFetch + "; sleep 120"}
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var inner, tunnel *store.EgressFetch
	for inner == nil || tunnel == nil {
		fetches, err := r.st.EgressFetches(ctx, e.ID())
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fetches {
			switch {
			case f.Kind == store.EgressHTTP && f.Path == "/is-number/-/is-number-6.0.0.tgz" && f.Status == 200 && f.Bytes > 0:
				inner = &f
			case f.Kind == store.EgressTunnel && f.Host == host:
				tunnel = &f
			}
		}
		if inner != nil && tunnel != nil {
			break
		}
		select {
		case <-e.Done():
			t.Fatalf("no HTTPS fetch through the terminated tunnel (%+v): ledger %+v", e.Status(), fetches)
		case <-ctx.Done():
			t.Fatalf("no HTTPS fetch through the terminated tunnel: ledger %+v", fetches)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if tunnel.Outcome != store.EgressFetched || tunnel.BytesUp == 0 {
		t.Errorf("tunnel row %+v", tunnel)
	}
	r.end(t, ctx, e, episode.Aborted, "test over")
}

// TestVerificationFetchesThroughItsOwnProxy: automatic verification of an
// effect whose episode had an egress proxy (agent profile, a policy
// granting the npm registry) runs verify_argv with a proxy of its own —
// the same signed allow list, recorded in the episode's fetch ledger — so
// a test that needs a dependency passes and the fix lands. The
// verification's socket is gone afterwards, and its decision body says it
// had egress.
func TestVerificationFetchesThroughItsOwnProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const host = "registry.npmjs.org"
	r, spec := egressRig(t, ctx, "verifyegress", host, withVerification("/bin/bash", "-c", verifyFetch))
	e, err := r.k.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	eff := landedFix(t, ctx, r.st, r.repo, r.base, e, nextExit(t, ctx, e))
	decs, err := r.st.Decisions(ctx, eff.ID)
	if err != nil {
		t.Fatal(err)
	}
	var body verify.Body
	for _, d := range decs {
		if d.Kind == store.DecisionVerification {
			if err := json.Unmarshal(d.Body, &body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !body.Egress || body.Reason != "verify_argv passed" {
		t.Errorf("verification decision %+v, want a pass with egress", body)
	}
	fetches, err := r.st.EgressFetches(ctx, e.ID())
	if err != nil {
		t.Fatal(err)
	}
	var got bool
	for _, f := range fetches {
		t.Logf("fetch %s %s %s %s %d %d bytes %s", f.Kind, f.Method, f.Host, f.Path, f.Status, f.Bytes, f.Outcome)
		got = got || (f.Host == host && f.Path == "/is-number/-/is-number-7.0.0.tgz" && f.Status == 200 && f.Bytes > 0)
	}
	if !got {
		t.Errorf("the egress ledger lacks the verification's fetch: %+v", fetches)
	}
	matches, _ := filepath.Glob(filepath.Join(shared.bed.Sockets, "verify-*"))
	if len(matches) != 0 {
		t.Errorf("verification sockets outlived it: %v", matches)
	}
	r.end(t, ctx, e, episode.Aborted, "test over")
}

// siteNets is what an operator of this machine lists in
// egress.allowed_nets: the addresses hosts resolve to that pinning refuses
// by default (here the registries resolve into 203.0.113.0/24); empty
// where they are public.
func siteNets(t *testing.T, hosts ...string) []string {
	var nets []string
	for _, h := range hosts {
		addrs, err := net.DefaultResolver.LookupNetIP(t.Context(), "ip", h)
		if err != nil {
			t.Fatalf("resolve %s: %v", h, err)
		}
		for _, a := range addrs {
			if _, err := broker.PinAddress(t.Context(), nil, a.String(), nil); err != nil {
				nets = append(nets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()).String())
			}
		}
	}
	return nets
}

// egressRig is a rig whose episodes may have an egress proxy to host (the
// agent profile compiled, the operator allowing host), and a spec under
// a signed policy granting it.
func egressRig(t *testing.T, ctx context.Context, name, host string, opts ...rigOpt) (*rig, episode.Spec) {
	t.Helper()
	agentProg := agentProfile(t)
	// The rig's egress first: an option may adjust it.
	r := newRig(t, ctx, name, append([]rigOpt{withConfig(func(c *episode.Config) {
		c.Profiles = map[string][]byte{episode.ProfileAgent: agentProg}
		c.Egress = &episode.EgressConfig{Operator: config.Egress{Allow: []string{host}, MaxBytesPerEpisode: 1 << 20,
			AllowedNets: siteNets(t, host)}, Ledger: c.Store.(egress.Ledger)}
	})}, opts...)...)
	spec := r.spec(nil)
	signed, err := policy.Sign(policyKey(), policyKeyID, policy.Document{Schema: policy.Schema, ID: name, Version: 1,
		Capability: grantSpec(), Semantic: policy.Semantic{MaxRisk: 0.5}, Egress: &policy.Egress{Allow: []string{host}}})
	if err != nil {
		t.Fatal(err)
	}
	spec.Policy, spec.Seccomp = signed, episode.ProfileAgent
	return r, spec
}

// agentProfile is the shipped agent seccomp profile, compiled.
func agentProfile(t *testing.T) []byte {
	t.Helper()
	p, err := seccomp.Shipped(episode.ProfileAgent)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := seccomp.Compile(p, seccomp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return prog.Bytes()
}

// TestAdmitReservesEgress: a queued task reserves its episode's egress
// byte cap as the proxy would be configured — the smaller of the policy's
// egress.max_bytes and the operator's max_bytes_per_episode — and nothing
// when its policy grants no egress.
func TestAdmitReservesEgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const host = "registry.npmjs.org"
	r, spec := egressRig(t, ctx, "admitegress", host) // operator cap 1 MiB
	res, err := r.k.Admit(spec)
	if err != nil || res.EgressBytes != 1<<20 {
		t.Fatalf("reserve under the operator's cap: %+v, %v", res, err)
	}
	signed, err := policy.Sign(policyKey(), policyKeyID, policy.Document{Schema: policy.Schema, ID: "admitegress", Version: 1,
		Capability: grantSpec(), Semantic: policy.Semantic{MaxRisk: 0.5}, Egress: &policy.Egress{Allow: []string{host}, MaxBytes: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	spec.Policy = signed
	if res, err := r.k.Admit(spec); err != nil || res.EgressBytes != 4096 {
		t.Fatalf("reserve under the policy's cap: %+v, %v", res, err)
	}
	spec.Policy = signPolicy(grantSpec())
	if res, err := r.k.Admit(spec); err != nil || res.EgressBytes != 0 {
		t.Fatalf("reserve without an egress grant: %+v, %v", res, err)
	}
}
