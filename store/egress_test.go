package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestEgressCapIsAtomic: sixteen concurrent reservations of 100 bytes
// under a 1000-byte cap — exactly ten succeed, and the counter says 1000.
// Without the conditional upsert (read, then write) several would see the
// same total and overshoot.
func TestEgressCapIsAtomic(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ep := e.episode(e.store).ep
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.store.ReserveEgress(ctx, ep.ID, 100, 1000)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrEgressCap) && protocol.AsWire(err).Code == protocol.CodeLimitExceeded:
				refused++
			default:
				t.Errorf("reserve: %v", err)
			}
		}()
	}
	wg.Wait()
	used, err := e.store.EgressUsed(ctx, ep.ID)
	if err != nil || ok != 10 || refused != 6 || used != 1000 {
		t.Fatalf("ok %d refused %d used %d err %v", ok, refused, used, err)
	}
	if err := e.store.ReleaseEgress(ctx, ep.ID, 300); err != nil {
		t.Fatal(err)
	}
	if got, err := e.store.ReserveEgress(ctx, ep.ID, 300, 1000); err != nil || got != 1000 {
		t.Fatalf("after release: %d %v", got, err)
	}
	if _, err := e.store.ReserveEgress(ctx, ep.ID, 2000, 1000); !errors.Is(err, ErrEgressCap) {
		t.Fatalf("over the cap at once: %v", err)
	}
	if _, err := e.store.ReserveEgress(ctx, ep.ID, -1, 1000); err == nil {
		t.Fatal("negative reservation accepted")
	}
}

// TestEgressLedgerRecordsFetches: rows come back in order with what was
// recorded; refused requests' odd bytes are recorded, not refused.
func TestEgressLedgerRecordsFetches(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ep := e.episode(e.store).ep
	sum := strings.Repeat("ab", 32)
	in := []EgressFetch{
		{EpisodeID: ep.ID, Kind: EgressHTTP, Method: "GET", Host: "proxy.golang.org", Path: "/x/@v/v1.0.0.zip",
			Outcome: EgressFetched, Status: 200, Bytes: 1234, SHA256: sum, Duration: 15 * time.Millisecond},
		{EpisodeID: ep.ID, Kind: EgressTunnel, Method: "CONNECT", Host: "proxy.golang.org", Outcome: EgressFetched,
			Status: 200, Bytes: 10, BytesUp: 20},
		{EpisodeID: ep.ID, Kind: EgressHTTP, Method: "POST", Host: "evil\x00.example", Path: "/\xff" + strings.Repeat("a", 5000),
			Outcome: EgressRefused, Code: "forbidden", Reason: "method", Status: 403},
	}
	// One row, then a batch (the proxy's writer): the same ledger.
	if err := e.store.RecordEgress(ctx, in[0]); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RecordEgress(ctx, in[1:]...); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RecordEgress(ctx, EgressFetch{EpisodeID: ep.ID, Kind: EgressHTTP, Outcome: EgressFetched, Bytes: -1}); err == nil {
		t.Fatal("negative bytes recorded")
	}
	// A batch with one bad row records none of it.
	if err := e.store.RecordEgress(ctx, in[0], EgressFetch{EpisodeID: ep.ID, Kind: "smtp", Outcome: EgressFetched}); err == nil {
		t.Fatal("a batch with an unknown kind recorded")
	}
	if err := e.store.RecordEgress(ctx, make([]EgressFetch, maxEgressBatch+1)...); err == nil {
		t.Fatal("an oversized batch was accepted")
	}
	if err := e.store.RecordEgress(ctx, EgressFetch{EpisodeID: ep.ID, Kind: "smtp", Outcome: EgressFetched}); err == nil {
		t.Fatal("unknown kind recorded")
	}
	out, err := e.store.EgressFetches(ctx, ep.ID)
	if err != nil || len(out) != 3 {
		t.Fatalf("%d rows, %v", len(out), err)
	}
	if out[0].SHA256 != sum || out[0].Bytes != 1234 || out[0].Duration != 15*time.Millisecond || out[1].BytesUp != 20 {
		t.Fatalf("rows: %+v", out[:2])
	}
	if out[2].Host != "evil.example" || len(out[2].Path) > 4096 {
		t.Fatalf("refused row: host %q path %d bytes", out[2].Host, len(out[2].Path))
	}
}
