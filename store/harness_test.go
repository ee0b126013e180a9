package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store/pgcluster"
	"github.com/autonomic-kernel/autonomic/store/storetest"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// testHarness is the package's one throwaway cluster, started by TestMain
// before any test runs and never reassigned; it lives only in the test
// binary.
var testHarness *storetest.Shared

func TestMain(m *testing.M) {
	testHarness = storetest.StartShared("autonomic-store-")
	os.Exit(testHarness.Run(m))
}

type env struct {
	t       testing.TB
	cluster *pgcluster.Cluster
	db      string
	store   *Postgres
}

// newEnv gives a test its own fresh, migrated database and a store on it.
func newEnv(t testing.TB) *env {
	t.Helper()
	return envOn(t, testHarness.Cluster, testHarness.Database(t, "t"))
}

func newEnvOn(t testing.TB, c *pgcluster.Cluster, db string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	return envOn(t, c, db)
}

// envOn is the environment on c's existing database db.
func envOn(t testing.TB, c *pgcluster.Cluster, db string) *env {
	e := &env{t: t, cluster: c, db: db}
	e.store = e.open("kernel-a", 0)
	return e
}

func (e *env) open(instance string, ttl time.Duration) *Postgres {
	e.t.Helper()
	return e.openConns(instance, ttl, 16)
}

func (e *env) openConns(instance string, ttl time.Duration, conns int) *Postgres {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Config{
		URL:        e.cluster.KernelConnString(e.db),
		AdminURL:   e.cluster.AdminConnString(e.db),
		InstanceID: instance,
		OwnerTTL:   ttl,
		MaxConns:   conns,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.Close)
	return s
}

// admin is a superuser connection to the test database, for tampering and
// for inspecting state behind the store's back.
func (e *env) admin() *pgx.Conn {
	e.t.Helper()
	c, err := pgx.Connect(context.Background(), e.cluster.AdminConnString(e.db))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

// fixture is an episode with a lease, ready to propose effects.
type fixture struct {
	ep    Episode
	lease Lease
}

func (e *env) episode(s *Postgres) fixture {
	e.t.Helper()
	ctx := ctxT(e.t)
	ep, err := s.CreateEpisode(ctx, NewEpisode{Spec: []byte(`{"intent":"test"}`), PolicyVersion: 1})
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := s.GrantLease(ctx, LeaseGrant{EpisodeID: ep.ID, Epoch: 1, Capabilities: []byte(`{"kinds":["git_commit"]}`), TTL: time.Hour})
	if err != nil {
		e.t.Fatal(err)
	}
	return fixture{ep: ep, lease: l}
}

// ready is readyEffect for the fixture's episode in epoch 1, failing t on
// error.
func (f fixture) ready(t testing.TB, s *Postgres) Effect {
	t.Helper()
	eff, err := readyEffect(ctxT(t), s, f.ep.ID, 1, f.lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

// readyEffect proposes an effect in epoch under lease and walks it to ready.
func readyEffect(ctx context.Context, s *Postgres, ep uuid.UUID, epoch int64, lease uuid.UUID) (Effect, error) {
	eff, err := s.ProposeEffect(ctx, Proposal{EpisodeID: ep, Epoch: epoch, LeaseID: lease, Kind: "git_commit", Class: 3,
		TargetID: "repo", Target: []byte(`{"ref":"refs/heads/main"}`), PayloadDigest: digest("patch")})
	if err != nil {
		return eff, err
	}
	if eff, err = s.PrepareEffect(ctx, Prepare{EffectID: eff.ID, Revision: eff.Revision, Epoch: epoch, TrajectoryVersion: 1, TrajectoryRegime: "stable"}); err != nil {
		return eff, err
	}
	if eff, err = s.Transition(ctx, Transition{EffectID: eff.ID, Revision: eff.Revision, Epoch: epoch, To: Evaluating}); err != nil {
		return eff, err
	}
	return s.Transition(ctx, Transition{EffectID: eff.ID, Revision: eff.Revision, Epoch: epoch, To: Ready})
}

func allow(context.Context, CommitView) error { return nil }

func code(err error) protocol.Code {
	if err == nil {
		return ""
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return "untyped:" + protocol.Code(err.Error())
}

func wantCode(t testing.TB, err error, want protocol.Code) {
	t.Helper()
	if code(err) != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func mustVerify(t testing.TB, s *Postgres, ep uuid.UUID) {
	t.Helper()
	rep, err := s.VerifyLedger(ctxT(t), ep)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("ledger broken at %d: %s", rep.Broken.Seq, rep.Broken.Reason)
	}
}

func kinds(t testing.TB, s *Postgres, ep uuid.UUID) string {
	t.Helper()
	es, err := s.Events(ctxT(t), ep)
	if err != nil {
		t.Fatal(err)
	}
	var k []string
	for _, e := range es {
		k = append(k, e.Kind)
	}
	return strings.Join(k, ",")
}
