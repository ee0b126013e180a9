package store

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store/storetest"
	"github.com/google/uuid"
)

// db_outage_blocks_authority: the cluster is stopped (fast shutdown, then
// kill -9 of the whole server) while commit paths and epoch advances are in
// flight. Every call fails with authority_unavailable while it is down, no
// call succeeds, nothing is half-written, and after a restart the same store
// recovers, the ledger verifies and the table agrees with the ledger.
func TestDBOutageBlocksAuthority(t *testing.T) {
	if testHarness.Cluster == nil {
		privileged.Skip(t, "no PostgreSQL cluster: "+testHarness.Err.Error())
	}
	dir, err := os.MkdirTemp("", "autonomic-outage-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// Its own cluster: this test kills it.
	t0 := time.Now()
	cluster, err := storetest.StartCluster(dir)
	t.Logf("cluster up in %s", time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cluster.Stop(context.Background()) }()
	e := newEnvOn(t, cluster, "outage")
	t.Logf("env in %s", time.Since(t0))
	s := e.store
	eps := []uuid.UUID{e.episode(s).ep.ID, e.episode(s).ep.ID}

	for _, mode := range []string{"fast shutdown", "kill -9"} {
		t.Run(mode, func(t *testing.T) {
			var down atomic.Bool // set once the server is gone
			var stop atomic.Bool
			var whileDown, okWhileDown atomic.Int64
			var mu sync.Mutex
			var bad []error
			record := func(started bool, err error) {
				if err == nil {
					if started {
						okWhileDown.Add(1)
					}
					return
				}
				if started {
					whileDown.Add(1)
				}
				if c := code(err); c != protocol.CodeAuthorityUnavailable {
					mu.Lock()
					bad = append(bad, err)
					mu.Unlock()
				}
			}
			call := func(f func(ctx context.Context) error) {
				wasDown := down.Load()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				record(wasDown, f(ctx))
			}
			var wg sync.WaitGroup
			for _, ep := range eps {
				for i := 0; i < 8; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for !stop.Load() {
							call(func(ctx context.Context) error { _, err := commitPath(ctx, s, ep); return err })
							if down.Load() {
								time.Sleep(2 * time.Millisecond)
							}
						}
					}()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						call(func(ctx context.Context) error {
							cur, err := s.Episode(ctx, ep)
							if err != nil {
								return err
							}
							_, err = s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: ep, FromEpoch: cur.Epoch, Reason: "outage"})
							if code(err) == protocol.CodeStaleRequestEpoch {
								return nil
							}
							return err
						})
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			time.Sleep(400 * time.Millisecond)
			if mode == "kill -9" {
				if err := cluster.Kill(); err != nil {
					t.Fatal(err)
				}
			} else if err := cluster.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			down.Store(true)
			time.Sleep(400 * time.Millisecond)
			// Direct calls of every kind while down.
			ctx := ctxT(t)
			for name, f := range map[string]func() error{
				"episode": func() error { _, err := s.Episode(ctx, eps[0]); return err },
				"advance": func() error { _, err := s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: eps[0], FromEpoch: 1}); return err },
				"commit": func() error {
					_, err := s.BeginCommit(ctx, CommitRequest{EffectID: uuid.New(), Revision: 1, Epoch: 1}, allow)
					return err
				},
				"unsettle": func() error { _, err := s.Unsettled(ctx, uuid.Nil); return err },
				"verify":   func() error { _, err := s.VerifyLedger(ctx, eps[0]); return err },
				"create":   func() error { _, err := s.CreateEpisode(ctx, NewEpisode{}); return err },
			} {
				if err := f(); code(err) != protocol.CodeAuthorityUnavailable {
					t.Errorf("%s while down: %v", name, err)
				}
			}
			stop.Store(true)
			wg.Wait()
			for _, err := range bad {
				t.Errorf("non-typed failure: %v", err)
			}
			if okWhileDown.Load() != 0 {
				t.Fatalf("%d calls succeeded while the database was down", okWhileDown.Load())
			}
			if whileDown.Load() == 0 {
				t.Fatal("no call ran while the database was down")
			}
			t1 := time.Now()
			if err := cluster.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("restart took %s", time.Since(t1))
			// The same store object recovers once the server is back.
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, err := s.Episode(ctx, eps[0])
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("store did not recover: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			for _, ep := range eps {
				checkConsistent(t, e, ep)
			}
			// And authority works again end to end.
			if _, err := commitPath(ctx, s, eps[0]); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d calls refused while down", whileDown.Load())
		})
	}

	// A restart nobody noticed: the pool still holds connections to the
	// old server. The first call must not fail because of them — nothing
	// reached the server, so the store retries once on a fresh connection.
	t.Run("silent restart", func(t *testing.T) {
		ctx := ctxT(t)
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = s.Episode(ctx, eps[0]) }()
		}
		wg.Wait()
		if err := cluster.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := cluster.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Episode(ctx, eps[0]); err != nil {
			t.Fatalf("read after silent restart: %v", err)
		}
		if _, err := commitPath(ctx, s, eps[1]); err != nil {
			t.Fatalf("commit path after silent restart: %v", err)
		}
		checkConsistent(t, e, eps[0])
		checkConsistent(t, e, eps[1])
	})
}

// checkConsistent: the ledger verifies, and replaying it yields exactly the
// effect states the tables hold — no change without its event, no event
// without its change — plus the epoch fencing invariants.
func checkConsistent(t *testing.T, e *env, ep uuid.UUID) {
	t.Helper()
	ctx := ctxT(t)
	s := e.store
	mustVerify(t, s, ep)
	es, err := s.Events(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	_, last := replay(t, es)
	admin := e.admin()
	rows, err := admin.Query(ctx, `SELECT id, state FROM effects WHERE episode_id = $1`, ep)
	if err != nil {
		t.Fatal(err)
	}
	table := map[uuid.UUID]EffectState{}
	for rows.Next() {
		var id uuid.UUID
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			t.Fatal(err)
		}
		table[id] = EffectState(st)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(table) != len(last) {
		t.Fatalf("%d effects in the table, %d in the ledger", len(table), len(last))
	}
	for id, st := range table {
		if last[id] != st {
			t.Fatalf("effect %s: table %s, ledger %s", id, st, last[id])
		}
	}
	cur, err := s.Episode(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	var staleOpen, liveOld, maxEpoch int64
	err = admin.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM effects WHERE episode_id = $1 AND epoch < $2 AND state = ANY($3)),
		(SELECT count(*) FROM leases WHERE episode_id = $1 AND epoch < $2 AND revoked_at IS NULL),
		(SELECT max(epoch) FROM epochs WHERE episode_id = $1)`, ep, cur.Epoch, abortableBeforeHorizon()).
		Scan(&staleOpen, &liveOld, &maxEpoch)
	if err != nil {
		t.Fatal(err)
	}
	if staleOpen != 0 || liveOld != 0 || maxEpoch != cur.Epoch {
		t.Fatalf("fencing half-applied: open old effects %d, live old leases %d, epochs %d vs %d",
			staleOpen, liveOld, maxEpoch, cur.Epoch)
	}
	un, err := s.Unsettled(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	// Interrupted commits are there to reconcile; settle them as an
	// adapter's reconcile would.
	for _, eff := range un {
		if eff.State == CommitIntent {
			if _, err := s.Transition(ctx, Transition{EffectID: eff.ID, Revision: eff.Revision, To: Aborted, Reason: "reconciled: not committed"}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := s.FinishCommit(ctx, Outcome{EffectID: eff.ID, State: Committed}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFirstCallAfterRestartSucceeds: the server restarts while the store's
// pool holds idle connections to the old one, over TCP as to an external
// database (a loopback forwarder to the cluster's socket: on TCP a write to
// a dead server's connection succeeds, so pgx cannot call the failure safe
// to retry). The first call after the restart, a mutation, gets a live
// connection — the pool pings one idle past idlePing and drops the dead —
// not authority_unavailable.
func TestFirstCallAfterRestartSucceeds(t *testing.T) {
	if testHarness.Cluster == nil {
		privileged.Skip(t, "no PostgreSQL cluster: "+testHarness.Err.Error())
	}
	dir, err := os.MkdirTemp("", "autonomic-restart-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cluster, err := storetest.StartCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cluster.Stop(context.Background()) }()
	newEnvOn(t, cluster, "restart")
	addr := forwardTCP(t, filepath.Join(dir, "sock", ".s.PGSQL.5432"))
	host, port, _ := net.SplitHostPort(addr)
	s, err := Open(ctxT(t), Config{URL: cluster.KernelConnString("restart") + " host=" + host + " port=" + port,
		InstanceID: "kernel-tcp", MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ep := (&env{t: t, cluster: cluster, db: "restart"}).episode(s).ep.ID
	// Fill the pool with idle connections: every one of them dies with the
	// server.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Episode(ctxT(t), ep); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := len(s.pool.idle); n < 2 {
		t.Fatalf("%d idle connection(s) before the restart, want several", n)
	}
	cur, err := s.Episode(ctxT(t), ep)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Restart(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(idlePing)
	if _, err := s.GrantLease(ctxT(t), LeaseGrant{EpisodeID: ep, Epoch: cur.Epoch, TTL: time.Hour}); err != nil {
		t.Fatalf("first mutation after the restart: %v", err)
	}
	if _, err := commitPath(ctxT(t), s, ep); err != nil {
		t.Fatalf("the commit path after the restart: %v", err)
	}
}

// forwardTCP listens on loopback and joins each connection to the Unix
// socket sock, closing both sides when either ends.
func forwardTCP(t *testing.T, sock string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}
