package store

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
)

func relayEpisode(t *testing.T, e *env, maxTokens, maxSpend int64) Episode {
	t.Helper()
	ctx := ctxT(t)
	ep, err := e.store.CreateEpisode(ctx, NewEpisode{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SetRelayBudget(ctx, ep.ID, maxTokens, maxSpend); err != nil {
		t.Fatal(err)
	}
	return ep
}

func reservation(ep uuid.UUID, tokens, spend int64) RelayReservation {
	return RelayReservation{EpisodeID: ep, Provider: "p", Route: "/v1/responses", Model: "m", RequestDigest: "sha256:00", Tokens: tokens, Spend: spend}
}

func TestRelayReserveSettleExhaust(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ep := relayEpisode(t, e, 1000, 500)

	r1, err := e.store.ReserveRelay(ctx, reservation(ep.ID, 600, 100))
	if err != nil {
		t.Fatal(err)
	}
	// 600 reserved: a second 600 does not fit, and nothing is charged.
	if _, err := e.store.ReserveRelay(ctx, reservation(ep.ID, 600, 100)); !errors.Is(err, protocol.E(protocol.CodeBudgetExhausted)) {
		t.Fatalf("second reservation: %v", err)
	}
	// Settling on the reported usage gives back the unused part.
	b, err := e.store.SettleRelay(ctx, RelaySettlement{CallID: r1.CallID, EpisodeID: ep.ID, Status: 200, UsageReported: true,
		InputTokens: 100, OutputTokens: 50, Spend: 7, ResponseDigest: "sha256:11", Duration: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if b.Tokens != 150 || b.Spend != 7 || !b.Exhausted {
		// Exhausted is already set: the refused reservation above recorded it.
		t.Fatalf("after settle: %+v", b)
	}
	// A call settles once.
	if _, err := e.store.SettleRelay(ctx, RelaySettlement{CallID: r1.CallID, EpisodeID: ep.ID, UsageReported: true}); !errors.Is(err, protocol.E(protocol.CodeNotFound)) {
		t.Fatalf("second settle: %v", err)
	}
	// A call without usage is charged its whole reservation.
	r2, err := e.store.ReserveRelay(ctx, reservation(ep.ID, 800, 400))
	if err != nil {
		t.Fatal(err)
	}
	if b, err = e.store.SettleRelay(ctx, RelaySettlement{CallID: r2.CallID, EpisodeID: ep.ID, Status: 502}); err != nil || b.Tokens != 950 || b.Spend != 407 {
		t.Fatalf("no-usage settle: %+v %v", b, err)
	}
	calls, err := e.store.RelayCalls(ctx, ep.ID)
	if err != nil || len(calls) != 2 || !calls[0].Settled || calls[0].ChargedTokens != 150 || calls[1].ChargedTokens != 800 ||
		calls[0].Settlement.ResponseDigest != "sha256:11" || calls[0].Reservation.Model != "m" {
		t.Fatalf("ledger: %+v %v", calls, err)
	}
	// The exhaustion is recorded once in the hash-chained ledger, however
	// many calls are refused.
	for range 3 {
		if _, err := e.store.ReserveRelay(ctx, reservation(ep.ID, 100, 0)); !errors.Is(err, protocol.E(protocol.CodeBudgetExhausted)) {
			t.Fatalf("over the limit: %v", err)
		}
	}
	events, err := e.store.Events(ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, ev := range events {
		kinds[ev.Kind]++
	}
	if kinds["inference_budget_exhausted"] != 1 || kinds["inference_reserved"] != 2 || kinds["inference_settled"] != 2 || kinds["inference_budget_set"] != 1 {
		t.Fatalf("events %v", kinds)
	}
	if rep, err := e.store.VerifyLedger(ctx, ep.ID); err != nil || !rep.OK() {
		t.Fatalf("ledger chain: %+v %v", rep, err)
	}
}

// A restart (a new store on the same database) and a new policy version
// keep the charge: only the limits move.
func TestRelayBudgetSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ep := relayEpisode(t, e, 1000, 0)
	if _, err := e.store.ReserveRelay(ctx, reservation(ep.ID, 900, 0)); err != nil {
		t.Fatal(err)
	}
	e.store.Close()
	again := e.open("kernel-a", 0)
	b, err := again.SetRelayBudget(ctx, ep.ID, 1000, 0)
	if err != nil || b.Tokens != 900 {
		t.Fatalf("after restart: %+v %v", b, err)
	}
	if _, err := again.ReserveRelay(ctx, reservation(ep.ID, 200, 0)); !errors.Is(err, protocol.E(protocol.CodeBudgetExhausted)) {
		t.Fatalf("restart reset the budget: %v", err)
	}
	if b, err = again.SetRelayBudget(ctx, ep.ID, 2000, 0); err != nil || b.Tokens != 900 || b.MaxTokens != 2000 {
		t.Fatalf("new limits: %+v %v", b, err)
	}
}

// Racing reservations never pass the limit together.
func TestRelayReservationRace(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ep := relayEpisode(t, e, 1000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.store.ReserveRelay(ctx, reservation(ep.ID, 300, 0))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				granted++
			case !errors.Is(err, protocol.E(protocol.CodeBudgetExhausted)):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	b, err := e.store.GetRelayBudget(ctx, ep.ID)
	if err != nil || granted != 3 || b.Tokens != 900 {
		t.Fatalf("granted %d, budget %+v %v", granted, b, err)
	}
}

func TestRelayRefusesWithoutBudgetOrOwnership(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ep, err := e.store.CreateEpisode(ctx, NewEpisode{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.ReserveRelay(ctx, reservation(ep.ID, 1, 0)); !errors.Is(err, protocol.E(protocol.CodeNotFound)) {
		t.Fatalf("no budget: %v", err)
	}
	if _, err := e.store.SetRelayBudget(ctx, ep.ID, 10, 0); err != nil {
		t.Fatal(err)
	}
	other := e.open("kernel-b", 0)
	if _, err := other.ReserveRelay(ctx, reservation(ep.ID, 1, 0)); !errors.Is(err, protocol.E(protocol.CodeStaleAuthority)) {
		t.Fatalf("a kernel without the episode's ownership reserved: %v", err)
	}
}
