package egress

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/autonomic-kernel/autonomic/store"
)

// bank charges the bytes delivered into the domain against the episode's
// durable cap. It reserves from the store ahead, in blocks, so most
// fetches cost no database round trip before their first byte; the cap is
// never exceeded (a block that does not fit shrinks to exactly what is
// needed), and Close gives back what was reserved and not delivered. A
// kernel that dies holding a block has spent it: at most bankBlock bytes
// of the cap, never more than the cap.
type bank struct {
	mu                 sync.Mutex
	ledger             Ledger
	p                  *Proxy
	reserved, consumed int64
}

const bankBlock = 4 << 20

// take charges n bytes, reserving from the store if the bank holds too
// little. Over the cap it returns an error wrapping store.ErrEgressCap
// and charges nothing.
func (b *bank) take(ctx context.Context, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.consumed+n <= b.reserved {
		b.consumed += n
		return nil
	}
	need := b.consumed + n - b.reserved
	block := max(need, bankBlock)
	_, err := b.ledger.ReserveEgress(ctx, b.p.cfg.EpisodeID, block, b.p.cfg.MaxBytes)
	if errors.Is(err, store.ErrEgressCap) && block > need {
		block = need // the last bytes under the cap
		_, err = b.ledger.ReserveEgress(ctx, b.p.cfg.EpisodeID, block, b.p.cfg.MaxBytes)
	}
	if err != nil {
		return err
	}
	b.reserved += block
	b.consumed += n
	return nil
}

// give returns n charged bytes that were not delivered (a body shorter
// than its length) to the bank.
func (b *bank) give(n int64) {
	b.mu.Lock()
	b.consumed -= min(n, b.consumed)
	b.mu.Unlock()
}

// close returns the unused reservation to the store.
func (b *bank) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if left := b.reserved - b.consumed; left > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if b.ledger.ReleaseEgress(ctx, b.p.cfg.EpisodeID, left) == nil {
			b.reserved = b.consumed
		}
	}
}
