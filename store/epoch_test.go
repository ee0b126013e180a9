package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store/ledger"
	"github.com/google/uuid"
)

func TestAdvanceEpochFences(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	f := e.episode(s)
	byState := map[EffectState]Effect{}
	for _, st := range []EffectState{Proposed, Prepared, Ready, CommitIntent, Committing} {
		byState[st] = driveTo(t, s, f, st)
	}
	adv, err := s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1, Reason: "seccomp violation"})
	if err != nil {
		t.Fatal(err)
	}
	if len(adv.StaledEffects) != 3 || len(adv.Unsettled) != 2 || len(adv.RevokedLeases) != 1 || adv.Lineage.ToEpoch != 2 {
		t.Fatalf("advance: %+v", adv)
	}
	for st, eff := range byState {
		got, err := s.Effect(ctx, eff.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := Stale
		if !st.PreIntent() {
			want = st // left for reconciliation, never silently staled
		}
		if got.State != want {
			t.Errorf("%s effect is now %s, want %s", st, got.State, want)
		}
	}
	// The same incident reported twice must not advance twice.
	_, err = s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1, Reason: "again"})
	wantCode(t, err, protocol.CodeStaleRequestEpoch)
	// Old epoch claims and old leases are refused.
	prop := Proposal{EpisodeID: f.ep.ID, Epoch: 1, LeaseID: f.lease.ID, Kind: "git_commit", Class: 3,
		TargetID: "repo", PayloadDigest: digest("p")}
	_, err = s.ProposeEffect(ctx, prop)
	wantCode(t, err, protocol.CodeStaleRequestEpoch)
	prop.Epoch = 2
	_, err = s.ProposeEffect(ctx, prop)
	wantCode(t, err, protocol.CodeStaleAuthority)
	_, err = s.GrantLease(ctx, LeaseGrant{EpisodeID: f.ep.ID, Epoch: 1, TTL: time.Minute})
	wantCode(t, err, protocol.CodeStaleRequestEpoch)
	// The effects past the horizon are still settled normally.
	ci := byState[CommitIntent]
	if _, err := s.Transition(ctx, Transition{EffectID: ci.ID, Revision: 1, Epoch: 2, To: Committing}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FinishCommit(ctx, Outcome{EffectID: ci.ID, State: Committed}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FinishCommit(ctx, Outcome{EffectID: byState[Committing].ID, State: CommitUnknown}); err != nil {
		t.Fatal(err)
	}
	un, err := s.Unsettled(ctx, uuid.Nil)
	if err != nil || len(un) != 1 || un[0].State != CommitUnknown {
		t.Fatalf("unsettled after advance: %+v %v", un, err)
	}
	// New authority in the new epoch works.
	l2, err := s.GrantLease(ctx, LeaseGrant{EpisodeID: f.ep.ID, Epoch: 2, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readyEffect(ctx, s, f.ep.ID, 2, l2.ID); err != nil {
		t.Fatal(err)
	}
	lin, err := s.Lineage(ctx, f.ep.ID)
	if err != nil || len(lin) != 1 || lin[0].FromEpoch != 1 || lin[0].Reason != "seccomp violation" {
		t.Fatalf("lineage: %+v %v", lin, err)
	}
	mustVerify(t, s, f.ep.ID)
}

// stale_epoch_race: an effect prepared under epoch N cannot reach
// commit_intent after the epoch becomes N+1, however the calls interleave.
func TestStaleEpochRace(t *testing.T) {
	e := newEnv(t)
	s := e.store

	t.Run("every step after the advance", func(t *testing.T) {
		ctx := ctxT(t)
		for _, at := range []EffectState{Proposed, Prepared, Evaluating, Ready} {
			f := e.episode(s)
			eff := driveTo(t, s, f, at)
			if _, err := s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1, Reason: "fence"}); err != nil {
				t.Fatal(err)
			}
			for _, claimed := range []int64{1, 2} {
				for _, to := range []EffectState{Prepared, Evaluating, Ready, CommitIntent} {
					err := attempt(ctx, s, eff, claimed, to)
					if c := code(err); c != protocol.CodeStaleAuthority && c != protocol.CodeStaleRequestEpoch {
						t.Fatalf("%s, claimed epoch %d, → %s after advance: %v", at, claimed, to, err)
					}
				}
			}
			if got, _ := s.Effect(ctx, eff.ID); got.State != Stale {
				t.Fatalf("effect is %s", got.State)
			}
		}
	})

	// BeginCommit holds the episode lock while its check runs; an advance
	// issued meanwhile waits, then finds the effect past the horizon and
	// leaves it for reconciliation.
	t.Run("advance during commit waits for it", func(t *testing.T) {
		ctx := ctxT(t)
		f := e.episode(s)
		eff, err := readyEffect(ctx, s, f.ep.ID, 1, f.lease.ID)
		if err != nil {
			t.Fatal(err)
		}
		inCheck, release := make(chan struct{}), make(chan struct{})
		advDone := make(chan EpochAdvance, 1)
		go func() {
			<-inCheck
			adv, err := s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: 1, Reason: "race"})
			if err != nil {
				t.Error(err)
			}
			advDone <- adv
		}()
		_, err = s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: 1}, func(context.Context, CommitView) error {
			close(inCheck)
			select {
			case <-advDone:
				return fmt.Errorf("advance did not wait for the episode lock")
			case <-time.After(200 * time.Millisecond):
			}
			close(release)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		adv := <-advDone
		if len(adv.Unsettled) != 1 || len(adv.StaledEffects) != 0 {
			t.Fatalf("advance after commit_intent: %+v", adv)
		}
		assertNoCommitUnderFencedEpoch(t, s, f.ep.ID)
	})

	t.Run("concurrent", func(t *testing.T) {
		ctx := ctxT(t)
		const rounds = 60
		f := e.episode(s)
		lease, epoch := f.lease.ID, int64(1)
		var won, lost int
		for i := 0; i < rounds; i++ {
			eff, err := readyEffect(ctx, s, f.ep.ID, epoch, lease)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var commitErr, advErr error
			start := make(chan struct{})
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				if rand.IntN(2) == 0 {
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				}
				_, commitErr = s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: 1, Epoch: epoch}, allow)
			}()
			go func() {
				defer wg.Done()
				<-start
				if rand.IntN(2) == 0 {
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				}
				_, advErr = s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: f.ep.ID, FromEpoch: epoch, Reason: "race"})
			}()
			close(start)
			wg.Wait()
			if advErr != nil {
				t.Fatal(advErr)
			}
			got, err := s.Effect(ctx, eff.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case commitErr == nil:
				won++
				if got.State != CommitIntent {
					t.Fatalf("committed effect is %s", got.State)
				}
			case code(commitErr) == protocol.CodeStaleAuthority || code(commitErr) == protocol.CodeStaleRequestEpoch:
				lost++
				if got.State != Stale {
					t.Fatalf("refused effect is %s", got.State)
				}
			default:
				t.Fatalf("BeginCommit: %v", commitErr)
			}
			epoch++
			l, err := s.GrantLease(ctx, LeaseGrant{EpisodeID: f.ep.ID, Epoch: epoch, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			lease = l.ID
		}
		t.Logf("%d rounds: commit first %d, advance first %d", rounds, won, lost)
		assertNoCommitUnderFencedEpoch(t, s, f.ep.ID)
		mustVerify(t, s, f.ep.ID)
	})
}

// replay walks an episode's ledger in order and checks that every
// commit_intent was recorded while its effect's epoch was the episode's
// current one. It returns each effect's terminal transitions.
func replay(t testing.TB, es []ledger.Entry) (terminal map[uuid.UUID][]EffectState, last map[uuid.UUID]EffectState) {
	t.Helper()
	terminal = map[uuid.UUID][]EffectState{}
	last = map[uuid.UUID]EffectState{}
	current := int64(1)
	for _, ev := range es {
		switch ev.Kind {
		case "epoch_advanced":
			var b struct {
				From, To      int64
				StaledEffects []uuid.UUID `json:"staled_effects"`
			}
			if err := json.Unmarshal(ev.Body, &b); err != nil {
				t.Fatal(err)
			}
			if b.From != current || b.To != current+1 || ev.Epoch != b.To {
				t.Fatalf("seq %d: epoch %d → %d while at %d", ev.Seq, b.From, b.To, current)
			}
			current = b.To
			for _, id := range b.StaledEffects {
				terminal[id] = append(terminal[id], Stale)
				last[id] = Stale
			}
		case "effect_proposed":
			var b struct {
				EffectID uuid.UUID `json:"effect_id"`
			}
			_ = json.Unmarshal(ev.Body, &b)
			last[b.EffectID] = Proposed
		case "effect_transition":
			var b struct {
				EffectID    uuid.UUID   `json:"effect_id"`
				EffectEpoch int64       `json:"effect_epoch"`
				To          EffectState `json:"to"`
			}
			if err := json.Unmarshal(ev.Body, &b); err != nil {
				t.Fatal(err)
			}
			if b.To == CommitIntent && b.EffectEpoch != current {
				t.Fatalf("seq %d: effect %s reached commit_intent under fenced epoch %d (current %d)",
					ev.Seq, b.EffectID, b.EffectEpoch, current)
			}
			if b.To.Terminal() {
				terminal[b.EffectID] = append(terminal[b.EffectID], b.To)
			}
			last[b.EffectID] = b.To
		}
	}
	return terminal, last
}

func assertNoCommitUnderFencedEpoch(t testing.TB, s *Postgres, ep uuid.UUID) {
	t.Helper()
	es, err := s.Events(ctxT(t), ep)
	if err != nil {
		t.Fatal(err)
	}
	replay(t, es)
}

// postgresql_epoch_commit_race: in each round, hundreds of goroutines push
// freshly proposed effects through prepare → evaluating → ready →
// commit_intent → committing → committed while each episode's epoch advances
// at a random moment, so the advance lands before, between and after every
// step. No effect reaches commit_intent under a fenced epoch (checked by
// replaying the ledger in lock order), each effect ends in exactly one
// terminal state which the table agrees with, every failure is a typed
// stale refusal (a deadlock or anything else fails the test), and the
// ledger verifies.
func TestPostgresqlEpochCommitRace(t *testing.T) {
	e := newEnv(t)
	// An ownership lease outlasting the rounds: this test is about epochs, and
	// on a loaded host eight rounds can take longer than the 15 s default.
	s := e.openConns("race", 10*time.Minute, 24)
	const (
		episodes   = 4
		perEpisode = 50 // goroutines per episode per round: 200 in all
		rounds     = 8
	)
	ctx := ctxT(t)
	eps := make([]uuid.UUID, episodes)
	for i := range eps {
		eps[i] = e.episode(s).ep.ID
	}
	var committed, staled atomic.Int64
	for r := 0; r < rounds; r++ {
		epoch := int64(r + 1)
		// Set-up, not raced: a lease and proposals in the current epoch.
		effects := make([][]Effect, episodes)
		for i, ep := range eps {
			l, err := s.GrantLease(ctx, LeaseGrant{EpisodeID: ep, Epoch: epoch, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			for k := 0; k < perEpisode; k++ {
				eff, err := s.ProposeEffect(ctx, Proposal{EpisodeID: ep, Epoch: epoch, LeaseID: l.ID, Kind: "git_commit",
					Class: 3, TargetID: "repo", PayloadDigest: digest(fmt.Sprint(r, i, k))})
				if err != nil {
					t.Fatal(err)
				}
				effects[i] = append(effects[i], eff)
			}
		}
		start := make(chan struct{})
		errs := make(chan error, episodes*(perEpisode+1))
		var wg sync.WaitGroup
		for i, ep := range eps {
			// finished counts this episode's effects that left the race.
			var finished atomic.Int64
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Spread over roughly the time a round takes, so the
				// advance lands anywhere from before the first step to
				// after the last commit. The last episode's advance waits
				// until half its effects are through, so every round has
				// commits whatever the host's speed (a slower commit path
				// or a loaded host once left none: the race then proved
				// only the stale side).
				time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
				for i == episodes-1 && finished.Load() < perEpisode/2 && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				if _, err := s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: ep, FromEpoch: epoch, Reason: "race"}); err != nil {
					errs <- fmt.Errorf("advance: %w", err)
				}
			}()
			for _, eff := range effects[i] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer finished.Add(1)
					<-start
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					ok, err := horizon(ctx, s, eff, epoch)
					switch {
					case err != nil:
						errs <- err
					case ok:
						committed.Add(1)
					default:
						staled.Add(1)
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	t.Logf("%d effects committed, %d refused as stale", committed.Load(), staled.Load())
	if committed.Load() == 0 || staled.Load() == 0 {
		t.Fatalf("race did not exercise both outcomes")
	}
	for _, ep := range eps {
		mustVerify(t, s, ep)
		es, err := s.Events(ctx, ep)
		if err != nil {
			t.Fatal(err)
		}
		terminal, last := replay(t, es)
		if len(last) != perEpisode*rounds {
			t.Fatalf("ledger names %d effects, want %d", len(last), perEpisode*rounds)
		}
		for id, st := range last {
			if !st.Terminal() {
				t.Fatalf("effect %s ended at %s", id, st)
			}
			if n := len(terminal[id]); n != 1 {
				t.Fatalf("effect %s reached %d terminal states: %v", id, n, terminal[id])
			}
			got, err := s.Effect(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != st {
				t.Fatalf("effect %s: table says %s, ledger %s", id, got.State, st)
			}
		}
		if cur, _ := s.Episode(ctx, ep); cur.Epoch != rounds+1 {
			t.Fatalf("episode at epoch %d", cur.Epoch)
		}
	}
}

// horizon drives a proposed effect to committed, as the broker would. An
// epoch advance before commit_intent is a typed refusal (false, nil); past
// commit_intent nothing may stop the outcome being recorded.
func horizon(ctx context.Context, s *Postgres, eff Effect, epoch int64) (bool, error) {
	for _, to := range []EffectState{Prepared, Evaluating, Ready, CommitIntent} {
		if err := attempt(ctx, s, eff, epoch, to); err != nil {
			if c := code(err); c == protocol.CodeStaleAuthority || c == protocol.CodeStaleRequestEpoch {
				return false, nil
			}
			return false, fmt.Errorf("%s: %w", to, err)
		}
	}
	if _, err := s.Transition(ctx, Transition{EffectID: eff.ID, Revision: eff.Revision, To: Committing}); err != nil {
		return false, err
	}
	if _, err := s.FinishCommit(ctx, Outcome{EffectID: eff.ID, State: Committed, Receipt: []byte(`{"ok":true}`)}); err != nil {
		return false, err
	}
	return true, nil
}

// commitPath is a worker-and-broker round trip: lease, propose, prepare,
// evaluate, ready, commit, committing, committed. It reports whether the
// effect committed; an epoch advance anywhere before commit_intent is a
// normal, typed refusal (false, nil); anything else is an error.
func commitPath(ctx context.Context, s *Postgres, ep uuid.UUID) (bool, error) {
	staleErr := func(err error) bool {
		c := code(err)
		return c == protocol.CodeStaleAuthority || c == protocol.CodeStaleRequestEpoch
	}
	cur, err := s.Episode(ctx, ep)
	if err != nil {
		return false, err
	}
	l, err := s.GrantLease(ctx, LeaseGrant{EpisodeID: ep, Epoch: cur.Epoch, TTL: time.Hour})
	if err != nil {
		if staleErr(err) {
			return false, nil
		}
		return false, err
	}
	eff, err := readyEffect(ctx, s, ep, cur.Epoch, l.ID)
	if err == nil {
		_, err = s.BeginCommit(ctx, CommitRequest{EffectID: eff.ID, Revision: eff.Revision, Epoch: cur.Epoch}, allow)
	}
	if err != nil {
		if staleErr(err) {
			return false, nil
		}
		return false, err
	}
	// Past the horizon: nothing may stop the outcome being recorded, even
	// though the epoch may have moved on meanwhile.
	if _, err := s.Transition(ctx, Transition{EffectID: eff.ID, Revision: eff.Revision, To: Committing}); err != nil {
		return false, err
	}
	if _, err := s.FinishCommit(ctx, Outcome{EffectID: eff.ID, State: Committed, Receipt: []byte(`{"ok":true}`)}); err != nil {
		return false, err
	}
	return true, nil
}
