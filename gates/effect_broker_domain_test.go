package gates

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/broker/client"
	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// TestEffectBrokerFromInsideADomain is the in-domain half of the
// af_unix_effect_broker gate: a worker with no network reaches an HTTP
// target only through the broker socket bound into its domain, with the
// real static client, across the whole commit horizon; the same socket
// refuses a process outside the domain's cgroup and a domain of another
// generation; the worker cannot reach the target directly.
func TestEffectBrokerFromInsideADomain(t *testing.T) {
	privileged.Require(t)
	if shared.err != nil {
		t.Fatalf("gates world: %v", shared.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bed := shared.bed

	const body = "hello from the world outside\n"
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/data" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, body)
	}))
	defer web.Close()
	port := web.Listener.Addr().(*net.TCPAddr).Port

	// Authority: a database, an episode at epoch 1 and a lease for http_read.
	dbName := "gate_broker_domain"
	if err := shared.cluster.CreateDatabase(ctx, dbName); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, store.Config{URL: shared.cluster.KernelConnString(dbName), AdminURL: shared.cluster.AdminConnString(dbName),
		InstanceID: "gate-kernel", OwnerTTL: time.Hour, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ep, err := st.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"intent":"fetch one page"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	caps, err := authority.EncodeLease(authority.MustCompile(authority.Spec{MaxClass: authority.ClassObservable, Allow: []string{"**"},
		Forbid: []string{}, Grants: []authority.Grant{{Kind: "http_read", Target: "web", MaxClass: 2}},
		Budget: authority.Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 30, EffectsPerMinute: 1000}}))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := st.GrantLease(ctx, store.LeaseGrant{EpisodeID: ep.ID, Epoch: ep.Epoch, Capabilities: caps, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	payloads, err := broker.OpenPayloads(filepath.Join(t.TempDir(), "payloads"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{Store: st, Payloads: payloads, Adapters: []broker.Adapter{&broker.HTTP{
		Payloads: payloads,
		Targets: map[string]broker.HTTPTarget{"web": {BaseURL: web.URL, Methods: []string{"GET"}, Paths: []string{"data"},
			AllowedNets: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}},
	}}, LeaseCheck: governor.LeaseCheckWith(func(uuid.UUID) authority.Verdict { return authority.Decide(nil) })})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}

	// The episode's socket, owned by the kernel's account: the launcher's
	// idmapped bind makes it the worker's inside the domain.
	sockID := "gate-ep"
	sockPath := filepath.Join(bed.Sockets, sockID+".sock")
	ln, err := broker.Listen(sockPath, bed.OwnerUID, bed.OwnerGID)
	if err != nil {
		t.Fatal(err)
	}
	domID := "gate-broker-g1"
	rel, err := filepath.Rel(testbed.CgroupV2Mount(), bed.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	current := "/" + rel + "/" + domID
	srv := &broker.Server{Broker: b, Binding: broker.Binding{EpisodeID: ep.ID, Cgroup: func() (string, bool) { return current, true }}}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	defer func() { stop(); <-served }()

	ws := "gate-ws"
	if _, err := bed.Workspace(ws, nil); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
E=%s
(exec 3<>/dev/tcp/127.0.0.1/%d) 2>/dev/null && echo DIRECT=open || echo DIRECT=refused
pick() { [[ $1 =~ \"$2\":\"?([^\",}]+) ]] && echo "${BASH_REMATCH[1]}"; }
p=$($E prepare -epoch 1 -lease %s -kind http_read -target-id web -target '{"method":"GET","path":"/data"}') || { echo "PREPARE-FAILED $p"; exit 1; }
id=$(pick "$p" id); rev=$(pick "$p" revision)
$E evaluate -epoch 1 -effect "$id" -revision "$rev" >/dev/null || { echo EVALUATE-FAILED; exit 1; }
c=$($E commit -epoch 1 -effect "$id" -revision "$rev") || { echo "COMMIT-FAILED $c"; exit 1; }
echo "STATE=$(pick "$c" state)"
f=$($E fetch -epoch 1 -effect "$id") || { echo "FETCH-FAILED $f"; exit 1; }
echo "FETCH=$f"
$E status -epoch 2 -effect "$id" >/dev/null 2>&1; echo "STALE_EPOCH_EXIT=$?"
`, effectClientPath, port, lease.ID)
	r, err := bed.Domains().Create(ctx, domain.Spec{ID: domID, Generation: 1, WorkspaceID: ws, BrokerSocket: sockID,
		Argv: []string{"/bin/bash", "-c", script}, OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := r.Wait()
	if err != nil {
		t.Fatal(err)
	}
	out := string(r.Output())
	t.Logf("worker transcript:\n%s", out)
	if ex.ExitCode == nil || *ex.ExitCode != 0 {
		t.Fatalf("worker failed: %+v\n%s", ex, out)
	}
	for _, want := range []string{"DIRECT=refused", "STATE=committed", "STALE_EPOCH_EXIT=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, base64.StdEncoding.EncodeToString([]byte(body))) && !strings.Contains(out, strings.TrimSpace(body)) {
		t.Errorf("the fetched response is not the target's body:\n%s", out)
	}

	// The same socket, from outside the domain's cgroup: refused.
	resp, err := client.Call(ctx, sockPath, &protocol.WorkerRequest{Protocol: protocol.WorkerVersion, RequestID: "outside",
		Epoch: 1, Action: protocol.WorkerStatus, EffectID: uuid.NewString()})
	// The broker answers a refused peer before reading anything (and the
	// client reads that answer even when its write failed), so anything
	// but peer_refused — a transport error included — proves nothing.
	switch {
	case err != nil:
		t.Errorf("a host process got no answer (transport error), not peer_refused: %v", err)
	case resp.OK || resp.Error == nil || resp.Error.Code != protocol.CodePeerRefused:
		t.Errorf("a host process was not refused as a peer: %+v", resp)
	}

	// A domain of another generation (another cgroup) on the same socket:
	// refused, even with a valid epoch and lease.
	r2, err := bed.Domains().Create(ctx, domain.Spec{ID: "gate-broker-g0", Generation: 1, WorkspaceID: ws, BrokerSocket: sockID,
		Argv: []string{"/bin/sh", "-c", effectClientPath + " status -epoch 1 -effect " + uuid.NewString() + "; echo EXIT=$?"}, OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Wait(); err != nil {
		t.Fatal(err)
	}
	out2 := string(r2.Output())
	t.Logf("other generation:\n%s", out2)
	if !strings.Contains(out2, "peer_refused") {
		t.Errorf("a domain of another generation was not refused:\n%s", out2)
	}
	_ = os.Remove(sockPath)
}
