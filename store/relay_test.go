package store

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
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

var errExhausted = protocol.E(protocol.CodeBudgetExhausted)

func TestRelayChargeReleaseRecord(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ep := relayEpisode(t, e, 1000, 500)

	// A block is clipped to what is left, never below min.
	got, b, err := e.store.ChargeRelay(ctx, ep.ID, RelayAmount{600, 100}, RelayAmount{5000, 100}, false)
	if err != nil || got.Tokens != 1000 || got.Spend != 100 || b.Tokens != 1000 || !b.Exhausted {
		t.Fatalf("block: %+v %+v %v", got, b, err)
	}
	if _, _, err := e.store.ChargeRelay(ctx, ep.ID, RelayAmount{1, 0}, RelayAmount{1, 0}, false); !errors.Is(err, errExhausted) {
		t.Fatalf("over the limit: %v", err)
	}
	// Giving back the unused part makes room again.
	if b, err = e.store.ReleaseRelay(ctx, ep.ID, RelayAmount{850, 93}); err != nil || b.Tokens != 150 || b.Spend != 7 {
		t.Fatalf("release: %+v %v", b, err)
	}
	if got, _, err = e.store.ChargeRelay(ctx, ep.ID, RelayAmount{800, 0}, RelayAmount{800, 0}, false); err != nil || got.Tokens != 800 {
		t.Fatalf("after release: %+v %v", got, err)
	}
	// Usage beyond the charge is charged whatever the limit: it happened.
	if _, b, err = e.store.ChargeRelay(ctx, ep.ID, RelayAmount{}, RelayAmount{400, 0}, true); err != nil || b.Tokens != 1350 {
		t.Fatalf("forced: %+v %v", b, err)
	}
	id, err := e.store.RecordRelayCall(ctx, RelayRecord{EpisodeID: ep.ID, Provider: "p", Route: "/v1/responses", Model: "m",
		RequestDigest: "sha256:00", Reserved: RelayAmount{600, 9}, Charged: RelayAmount{150, 7}, Status: 200, UsageReported: true,
		InputTokens: 100, OutputTokens: 50, ResponseDigest: "sha256:11", Duration: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	calls, err := e.store.RelayCalls(ctx, ep.ID)
	if err != nil || len(calls) != 1 || calls[0].ID != id || calls[0].Charged.Tokens != 150 || calls[0].ResponseDigest != "sha256:11" ||
		calls[0].Duration != 3*time.Millisecond || calls[0].Model != "m" {
		t.Fatalf("ledger: %+v %v", calls, err)
	}
	// The exhaustion is recorded once, however many charges are refused.
	for range 3 {
		if _, _, err := e.store.ChargeRelay(ctx, ep.ID, RelayAmount{1, 0}, RelayAmount{1, 0}, false); !errors.Is(err, errExhausted) {
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
	if kinds["inference_budget_exhausted"] != 1 || kinds["inference_budget_charged"] != 3 || kinds["inference_call"] != 1 ||
		kinds["inference_budget_released"] != 1 || kinds["inference_budget_set"] != 1 {
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
	if _, _, err := e.store.ChargeRelay(ctx, ep.ID, RelayAmount{900, 0}, RelayAmount{900, 0}, false); err != nil {
		t.Fatal(err)
	}
	e.store.Close()
	again := e.open("kernel-a", 0)
	// A restarted kernel takes the episode's lease first (its Recover
	// does): the lease names the process, not only the instance.
	if _, err := again.AcquireOwnership(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	b, err := again.SetRelayBudget(ctx, ep.ID, 1000, 0)
	if err != nil || b.Tokens != 900 {
		t.Fatalf("after restart: %+v %v", b, err)
	}
	if _, _, err := again.ChargeRelay(ctx, ep.ID, RelayAmount{200, 0}, RelayAmount{200, 0}, false); !errors.Is(err, errExhausted) {
		t.Fatalf("restart reset the budget: %v", err)
	}
	if b, err = again.SetRelayBudget(ctx, ep.ID, 2000, 0); err != nil || b.Tokens != 900 || b.MaxTokens != 2000 {
		t.Fatalf("new limits: %+v %v", b, err)
	}
}

// Racing charges never pass the limit together.
func TestRelayChargeRace(t *testing.T) {
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
			_, _, err := e.store.ChargeRelay(ctx, ep.ID, RelayAmount{300, 0}, RelayAmount{300, 0}, false)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				granted++
			case !errors.Is(err, errExhausted):
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
	if _, _, err := e.store.ChargeRelay(ctx, ep.ID, RelayAmount{1, 0}, RelayAmount{1, 0}, false); !errors.Is(err, protocol.E(protocol.CodeNotFound)) {
		t.Fatalf("no budget: %v", err)
	}
	if _, err := e.store.SetRelayBudget(ctx, ep.ID, 10, 0); err != nil {
		t.Fatal(err)
	}
	other := e.open("kernel-b", 0)
	if _, _, err := other.ChargeRelay(ctx, ep.ID, RelayAmount{1, 0}, RelayAmount{1, 0}, false); !errors.Is(err, protocol.E(protocol.CodeStaleAuthority)) {
		t.Fatalf("a kernel without the episode's ownership charged: %v", err)
	}
	if _, _, err := e.store.ChargeRelay(ctx, ep.ID, RelayAmount{2, 0}, RelayAmount{1, 0}, false); !errors.Is(err, protocol.E(protocol.CodeInvalidField)) {
		t.Fatalf("min above want: %v", err)
	}
}

// TestRelayRefusalRecorded: a refusal is one inference_refused event,
// clipped and cleaned, and only with a catalogue code.
func TestRelayRefusalRecorded(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ep := relayEpisode(t, e, 1000, 500)
	if err := e.store.RecordRelayRefusal(ctx, RelayRefusal{EpisodeID: ep.ID, Code: "made_up", Status: 400}); err == nil {
		t.Fatal("a code outside the catalogue was recorded")
	}
	long := "/v1/" + strings.Repeat("a", 1000) + "\x00\xff"
	if err := e.store.RecordRelayRefusal(ctx, RelayRefusal{EpisodeID: ep.ID, Provider: "p", Method: "GET", Route: long,
		Model: "m\x00", Code: protocol.CodeRouteRefused, Status: 404}); err != nil {
		t.Fatal(err)
	}
	events, err := e.store.Events(ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	ev := events[len(events)-1]
	var b map[string]any
	if err := json.Unmarshal(ev.Body, &b); err != nil {
		t.Fatal(err)
	}
	if ev.Kind != "inference_refused" || b["code"] != "route_refused" || b["status"] != float64(404) || b["model"] != "m" ||
		len(b["route"].(string)) != 256 || b["method"] != "GET" {
		t.Fatalf("event %s %v", ev.Kind, b)
	}
}
