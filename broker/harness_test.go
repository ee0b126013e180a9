package broker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/broker/client"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/pgcluster"
	"github.com/autonomic-kernel/autonomic/store/storetest"
	"github.com/google/uuid"
)

// testHarness is the package's throwaway PostgreSQL cluster, started by
// TestMain and never reassigned; it lives only in the test binary.
var testHarness *storetest.Shared

func TestMain(m *testing.M) {
	// The crash tests re-execute this binary as a "kernel" that dies in the
	// commit window; it talks to the parent's cluster.
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	// TestPeerAliveAcrossUIDs re-executes this binary as an unprivileged
	// peer checker: it needs no cluster.
	if pid := os.Getenv(peerAliveEnv); pid != "" {
		peerAliveHelper(pid)
	}
	// TestPeerPidfdFallback re-executes it as a peer that connects and
	// waits to be killed.
	if path := os.Getenv(peerConnectEnv); path != "" {
		peerConnectHelper(path)
	}
	// A fuzzing worker runs only the fuzz target (FuzzScanPatch): no
	// cluster, which it would start anew each time the coordinator
	// restarts it.
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.fuzzworker") {
			os.Exit(m.Run())
		}
	}
	testHarness = storetest.StartShared("autonomic-broker-")
	os.Exit(testHarness.Run(m))
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env is one test's database, episode, lease, broker and socket.
type env struct {
	t        testing.TB
	cluster  *pgcluster.Cluster
	db       string
	store    *store.Postgres
	dir      string
	payloads *Payloads
	ep       store.Episode
	lease    store.Lease
	key      ed25519.PrivateKey
	broker   *Broker
	cfg      Config
	socket   string
	cgroup   atomic.Value // string: the "current domain" cgroup
	server   *Server
	seq      atomic.Int64
	verdict  testVerdict // the lease check's standing verdict
}

func openStore(t testing.TB, c *pgcluster.Cluster, db string) *store.Postgres {
	t.Helper()
	s, err := store.Open(ctxT(t), store.Config{URL: c.KernelConnString(db), AdminURL: c.AdminConnString(db),
		InstanceID: "kernel-a", OwnerTTL: time.Hour, MaxConns: 24})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// newEnv builds the environment; adapt may add adapters to cfg before the
// broker is built.
func newEnv(t testing.TB, adapt func(e *env, cfg *Config)) *env {
	t.Helper()
	return newEnvOn(t, testHarness.Cluster, testHarness.Database(t, "b"), adapt)
}

// newEnvOn builds the environment on cluster's existing database db.
func newEnvOn(t testing.TB, cluster *pgcluster.Cluster, db string, adapt func(e *env, cfg *Config)) *env {
	t.Helper()
	e := &env{t: t, cluster: cluster, db: db, dir: t.TempDir()}
	e.store = openStore(t, cluster, e.db)
	var err error
	if e.payloads, err = OpenPayloads(filepath.Join(e.dir, "payloads")); err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	e.key = priv
	ctx := ctxT(t)
	if e.ep, err = e.store.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"intent":"broker test"}`), PolicyVersion: 1}); err != nil {
		t.Fatal(err)
	}
	e.grant(1)
	e.cfg = Config{Store: e.store, Payloads: e.payloads, DecisionKeys: map[string]ed25519.PublicKey{"operator": pub},
		LeaseCheck: e.verdict.check}
	if adapt != nil {
		adapt(e, &e.cfg)
	}
	if e.broker, err = New(e.cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := e.broker.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	self, err := cgroupOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	e.cgroup.Store(self)
	return e
}

func (e *env) grant(epoch int64) {
	e.t.Helper()
	e.grantSpec(epoch, wideSpec())
}

// grantSpec grants a lease whose document is spec's, as the kernel mints.
func (e *env) grantSpec(epoch int64, spec authority.Spec) {
	e.t.Helper()
	caps := leaseDoc(e.t, spec)
	l, err := e.store.GrantLease(ctxT(e.t), store.LeaseGrant{EpisodeID: e.ep.ID, Epoch: epoch, Capabilities: caps, TTL: time.Hour})
	if err != nil {
		e.t.Fatal(err)
	}
	e.lease = l
}

// serve starts the episode's socket server, bound to e.cgroup.
func (e *env) serve(concurrency int) {
	e.t.Helper()
	e.serveWith(concurrency, nil)
}

// serveWith is serve with adjust applied to the server before it starts.
func (e *env) serveWith(concurrency int, adjust func(*Server)) {
	e.t.Helper()
	sockDir := filepath.Join(e.dir, "sockets")
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	e.socket = filepath.Join(sockDir, "ep.sock")
	ln, err := Listen(e.socket, os.Getuid(), os.Getgid())
	if err != nil {
		e.t.Fatal(err)
	}
	e.server = &Server{Broker: e.broker, Concurrency: concurrency, IdleTimeout: time.Second, ReadTimeout: 2 * time.Second,
		BindWait: time.Second, Binding: Binding{EpisodeID: e.ep.ID, Cgroup: func() (string, bool) {
			cg := e.cgroup.Load().(string)
			return cg, cg != ""
		}}}
	if adjust != nil {
		adjust(e.server)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.server.Serve(ctx, ln) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Error(err)
		}
	})
}

func (e *env) rid() string { return "r" + strconv.FormatInt(e.seq.Add(1), 10) }

// call sends one request over the socket.
func (e *env) call(req *protocol.WorkerRequest) *protocol.WorkerResponse {
	e.t.Helper()
	req.Protocol = protocol.WorkerVersion
	if req.RequestID == "" {
		req.RequestID = e.rid()
	}
	resp, err := client.Call(ctxT(e.t), e.socket, req)
	if err != nil {
		e.t.Fatalf("%s: %v", req.Action, err)
	}
	return resp
}

// do calls the broker directly (no socket) as the episode's worker.
func (e *env) do(req *protocol.WorkerRequest) *protocol.WorkerResponse {
	e.t.Helper()
	req.Protocol = protocol.WorkerVersion
	if req.RequestID == "" {
		req.RequestID = e.rid()
	}
	if err := req.Validate(); err != nil {
		e.t.Fatalf("test request invalid: %v", err)
	}
	return e.broker.Handle(ctxT(e.t), e.ep.ID, req)
}

func (e *env) epoch() int64 {
	ep, err := e.store.Episode(ctxT(e.t), e.ep.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return ep.Epoch
}

func prepareReq(e *env, kind, target string, t any, payload []byte) *protocol.WorkerRequest {
	tb, _ := json.Marshal(t)
	return &protocol.WorkerRequest{Action: protocol.WorkerPrepare, Epoch: e.epoch(), LeaseID: e.lease.ID.String(),
		Kind: kind, TargetID: target, Target: tb, PayloadB64: b64(payload)}
}

func byEffectReq(e *env, action string, r *protocol.EffectResult) *protocol.WorkerRequest {
	req := &protocol.WorkerRequest{Action: action, Epoch: e.epoch(), EffectID: r.ID}
	if action != protocol.WorkerStatus && action != protocol.WorkerFetchResponse {
		req.Revision = r.Revision
	}
	return req
}

func mustOK(t testing.TB, r *protocol.WorkerResponse) *protocol.EffectResult {
	t.Helper()
	if !r.OK {
		t.Fatalf("refused: %+v", r.Error)
	}
	return r.Result
}

func wantErr(t testing.TB, r *protocol.WorkerResponse, code protocol.Code) {
	t.Helper()
	if r.OK || r.Error.Code != code {
		if r.OK {
			t.Fatalf("ok (%s), want %s", r.Result.State, code)
		}
		t.Fatalf("got %s, want %s", r.Error.Code, code)
	}
}

// approve signs an approval of the effect as it stands in the store.
func (e *env) approve(id string) *protocol.Approval {
	e.t.Helper()
	eff, err := e.store.Effect(ctxT(e.t), uuid.MustParse(id))
	if err != nil {
		e.t.Fatal(err)
	}
	a, err := SignApproval(e.key, "operator", ApprovalFor(eff, "allow"))
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}
