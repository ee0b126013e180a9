package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// testHarness is the package's throwaway cluster, started by TestMain and
// handed to tests through newEnv; it lives only in the test binary.
var testHarness *storetest.Shared

const (
	helperEnv    = "AUTONOMIC_API_TEST_PEER"
	helperKeyEnv = "AUTONOMIC_API_TEST_PEER_ADD_KEY" // the peer registers this policy key instead
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(helperEnv); sock != "" {
		// Re-executed as another uid: one request, print the outcome.
		var err error
		if key := os.Getenv(helperKeyEnv); key != "" {
			err = NewClient(sock).AddKey(context.Background(), "peer-key", key)
		} else {
			_, err = NewClient(sock).Episodes(context.Background(), 1)
		}
		switch {
		case err == nil:
			fmt.Print("allowed")
		case IsUnreachable(err):
			fmt.Print("unreachable")
		default:
			fmt.Print(string(protocol.AsWire(err).Code))
		}
		os.Exit(0)
	}
	testHarness = storetest.StartShared("autonomic-api-")
	os.Exit(testHarness.Run(m))
}

type env struct {
	store  *store.Postgres
	sock   string
	client *Client
}

func newEnv(t *testing.T, access Access) *env {
	t.Helper()
	return newEnvWith(t, access, nil)
}

// newEnvWith is newEnv with a hook that completes the server's
// configuration once the store is open (e.g. to wire a broker onto it).
func newEnvWith(t *testing.T, access Access, adapt func(st *store.Postgres, cfg *Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, c := testHarness.Database(t, "api"), testHarness.Cluster
	st, err := store.Open(ctx, store.Config{URL: c.KernelConnString(db), AdminURL: c.AdminConnString(db), InstanceID: "api-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	sock := filepath.Join(publicTempDir(t), "api.sock")
	ln, err := Listen(sock, os.Getuid(), -1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: st, Access: access}
	if adapt != nil {
		adapt(st, &cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	t.Cleanup(func() { stop(); <-done })
	return &env{store: st, sock: sock, client: NewClient(sock)}
}

// publicTempDir is a 0755 directory directly under the system temp dir,
// so another uid can traverse to what is inside (t.TempDir's parent is
// private); access is then decided by each file's own mode.
func publicTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "autonomic-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

func wantCode(t *testing.T, err error, code protocol.Code) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

func TestOperatorViewsOverTheSocket(t *testing.T) {
	e := newEnv(t, Access{KernelUID: uint32(os.Getuid()), OperatorGID: -1})
	ctx := ctxT(t)
	ep, err := e.store.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"origin_intent":"fix the test"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := e.store.GrantLease(ctx, store.LeaseGrant{EpisodeID: ep.ID, Epoch: 1, Capabilities: []byte(`{}`), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	eff, err := e.store.ProposeEffect(ctx, store.Proposal{EpisodeID: ep.ID, Epoch: 1, LeaseID: lease.ID, Kind: "git_commit", Class: 3,
		TargetID: "repo", Target: []byte(`{"ref":"refs/heads/main"}`), PayloadDigest: digest("patch")})
	if err != nil {
		t.Fatal(err)
	}

	eps, err := e.client.Episodes(ctx, 10)
	if err != nil || len(eps) != 1 || eps[0].ID != ep.ID.String() || eps[0].State != "active" || eps[0].Spec != nil {
		t.Fatalf("list: %+v %v", eps, err)
	}
	one, err := e.client.Episode(ctx, ep.ID.String())
	if err != nil || one.Epoch != 1 || !strings.Contains(string(one.Spec), "fix the test") || one.Live != nil {
		t.Fatalf("status: %+v %v", one, err)
	}
	effs, err := e.client.Effects(ctx, ep.ID.String())
	if err != nil || len(effs) != 1 || effs[0].ID != eff.ID.String() || effs[0].State != "proposed" {
		t.Fatalf("effects: %+v %v", effs, err)
	}
	shown, err := e.client.Effect(ctx, eff.ID.String())
	if err != nil || shown.PayloadDigest != digest("patch") || shown.Class != 3 {
		t.Fatalf("effect: %+v %v", shown, err)
	}
	all, err := e.client.Events(ctx, ep.ID.String(), -1, 100)
	if err != nil || len(all) < 3 || all[0].Seq != 1 {
		t.Fatalf("events: %d %v", len(all), err)
	}
	last, err := e.client.Events(ctx, ep.ID.String(), -1, 1)
	if err != nil || len(last) != 1 || last[0].Seq != all[len(all)-1].Seq {
		t.Fatalf("tail 1: %+v %v", last, err)
	}
	after, err := e.client.Events(ctx, ep.ID.String(), 1, 1)
	if err != nil || len(after) != 1 || after[0].Seq != 2 {
		t.Fatalf("after 1: %+v %v", after, err)
	}
	v, err := e.client.Verify(ctx, ep.ID.String())
	if err != nil || !v.OK || v.Entries != len(all) {
		t.Fatalf("verify: %+v %v", v, err)
	}
	// The egress fetch ledger, as recorded, oldest first.
	if fs, err := e.client.Egress(ctx, ep.ID.String()); err != nil || len(fs) != 0 {
		t.Fatalf("egress before any fetch: %+v %v", fs, err)
	}
	sum := strings.Repeat("cd", 32)
	if err := e.store.RecordEgress(ctx,
		store.EgressFetch{EpisodeID: ep.ID, Kind: store.EgressHTTP, Method: "GET", Host: "registry.npmjs.org",
			Path: "/is-number/-/is-number-7.0.0.tgz", Outcome: store.EgressCached, Status: 200, Bytes: 3730, SHA256: sum},
		store.EgressFetch{EpisodeID: ep.ID, Kind: store.EgressTunnel, Method: "CONNECT", Host: "github.com:443",
			Outcome: store.EgressRefused, Code: "forbidden", Reason: "not on the policy's egress allowlist", Status: 403}); err != nil {
		t.Fatal(err)
	}
	fs, err := e.client.Egress(ctx, ep.ID.String())
	if err != nil || len(fs) != 2 || fs[0].Outcome != "cached" || fs[0].Bytes != 3730 || fs[0].SHA256 != sum ||
		fs[0].Path != "/is-number/-/is-number-7.0.0.tgz" || fs[1].Outcome != "refused" || fs[1].Code != "forbidden" {
		t.Fatalf("egress: %+v %v", fs, err)
	}
	_, err = e.client.Egress(ctx, "0190f6b2-0000-7000-8000-000000000000")
	wantCode(t, err, protocol.CodeNotFound)
	pf, err := e.client.Preflight(ctx)
	if err != nil || pf.Verdict != "ok" || len(pf.Checks) != 1 || pf.Checks[0].Name != "database" || !pf.Checks[0].OK {
		t.Fatalf("preflight: %+v %v", pf, err)
	}

	// Start is cleanly unavailable without a controller.
	_, err = e.client.Start(ctx, []byte(`{"origin_intent":"x"}`))
	wantCode(t, err, protocol.CodeUnknownAction)

	// Bad input: typed, and nothing changes.
	_, err = e.client.Episode(ctx, "not-a-uuid")
	wantCode(t, err, protocol.CodeInvalidField)
	_, err = e.client.Episode(ctx, "0190f6b2-0000-7000-8000-000000000000")
	wantCode(t, err, protocol.CodeNotFound)
	_, err = e.client.Abort(ctx, ep.ID.String(), "")
	wantCode(t, err, protocol.CodeInvalidField)
	var raw struct{}
	err = e.client.do(ctx, http.MethodPost, "/v1/episodes/"+ep.ID.String()+"/abort", nil, map[string]string{"reason": "x", "force": "yes"}, &raw)
	wantCode(t, err, protocol.CodeUnknownField)
	if got, _ := e.store.Episode(ctx, ep.ID); got.State != store.EpisodeActive {
		t.Fatalf("a refused abort changed the episode: %s", got.State)
	}

	// Abort (no controller: the store ends it, fencing by ownership).
	ab, err := e.client.Abort(ctx, ep.ID.String(), "operator says stop")
	if err != nil || ab.State != "aborted" {
		t.Fatalf("abort: %+v %v", ab, err)
	}
	_, err = e.client.Abort(ctx, ep.ID.String(), "again")
	if err == nil {
		t.Fatal("aborting an ended episode must be refused")
	}
	if v, err := e.client.Verify(ctx, ep.ID.String()); err != nil || !v.OK {
		t.Fatalf("ledger after abort: %+v %v", v, err)
	}
}

func TestSocketModeAndOwner(t *testing.T) {
	e := newEnv(t, Access{KernelUID: uint32(os.Getuid()), OperatorGID: -1})
	st, err := os.Lstat(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v, want socket 0660", st.Mode())
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Getuid() {
		t.Fatalf("socket owner %d", uid)
	}
	// A second kernel on the same socket is refused; the first keeps it.
	if _, err := Listen(e.sock, os.Getuid(), -1); err == nil || !strings.Contains(err.Error(), "already serves") {
		t.Fatalf("second listener: %v", err)
	}
	// A non-socket at the path is never removed.
	p := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(p, os.Getuid(), -1); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	// The socket's directory is made when missing (the shipped
	// /run/autonomic), 0750; nothing above it is.
	run := filepath.Join(publicTempDir(t), "run-autonomic")
	ln, err := Listen(filepath.Join(run, "api.sock"), os.Getuid(), -1)
	if err != nil {
		t.Fatalf("a missing socket directory: %v", err)
	}
	ln.Close()
	if fi, err := os.Stat(run); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("the socket's directory: %v %v", fi, err)
	}
	if _, err := Listen(filepath.Join(run, "a", "b", "api.sock"), os.Getuid(), -1); err == nil {
		t.Fatal("Listen made a tree of directories")
	}
}

// asPeer runs this test binary as uid/gid and makes one request.
func asPeer(t *testing.T, sock string, uid, gid uint32) string {
	t.Helper()
	// The test binary sits in a private build directory; the peer needs a
	// copy it can execute.
	bin := filepath.Join(publicTempDir(t), "peer.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("peer helper: %v", err)
	}
	return string(out)
}

func TestPeerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		privileged.Skip(t, "switching the peer's uid needs root")
	}
	const nobody, nogroup = 65534, 65534
	e := newEnv(t, Access{KernelUID: 12345, OperatorGID: -1})
	// Layer 1: the socket's mode keeps a stranger out at connect.
	if got := asPeer(t, e.sock, nobody, nogroup); got != "unreachable" {
		t.Fatalf("stranger through mode 0660: %q", got)
	}
	// Layer 2: with the mode loosened (an operator's mistake, or the
	// window between bind and chmod), SO_PEERCRED still refuses.
	if err := os.Chmod(e.sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if got := asPeer(t, e.sock, nobody, nogroup); got != string(protocol.CodePeerRefused) {
		t.Fatalf("stranger by peer credentials: %q", got)
	}
	// Root is always allowed.
	if _, err := e.client.Episodes(ctxT(t), 1); err != nil {
		t.Fatalf("root: %v", err)
	}

	// A member of the operator group is allowed.
	op := newEnv(t, Access{KernelUID: 12345, OperatorGID: nogroup})
	if err := os.Chown(op.sock, 0, nogroup); err != nil {
		t.Fatal(err)
	}
	if got := asPeer(t, op.sock, nobody, nogroup); got != "allowed" {
		t.Fatalf("operator group member: %q", got)
	}
}
