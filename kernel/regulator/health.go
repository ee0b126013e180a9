package regulator

import (
	"context"
	"time"

	"github.com/autonomic-kernel/autonomic/store"
)

// StoreProbe is what the health loop asks of the store: the operator
// API's database check, one row.
type StoreProbe interface {
	ListEpisodes(ctx context.Context, limit int) ([]store.Episode, error)
}

// SaturationCount is what the health loop asks of the broker: its count
// of worker connections refused as saturated (broker.Saturations).
type SaturationCount interface {
	Saturations() uint64
}

// HealthLoop is serve's feed of the live regulator for the faults no
// episode sees: database loss and broker saturation. Both go in one report
// per interval, so the regulator counts intervals, not sources, toward
// recovery.
type HealthLoop struct {
	store  StoreProbe
	broker SaturationCount
	sink   *Live
	every  time.Duration
	// seen is the broker's count at the previous interval.
	seen uint64
}

// NewHealthLoop returns the health loop reporting to sink every interval.
func NewHealthLoop(st StoreProbe, b SaturationCount, sink *Live, every time.Duration) *HealthLoop {
	return &HealthLoop{store: st, broker: b, sink: sink, every: every, seen: b.Saturations()}
}

// Watch observes every interval until ctx ends.
func (h *HealthLoop) Watch(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.Observe(ctx)
	}
}

// Observe is one interval. A failed store query (or one slower than the
// interval) is database loss, which caps autonomy at observe at once. Any
// connection the broker refused as saturated since the previous interval
// is broker saturation, which caps it at advise at once: workers are being
// turned away, so the kernel is not keeping up with what it authorised. A
// clean interval clears only these two faults (the sensor bank's stand),
// and the regulator steps back up only after recover_after consecutive
// clean intervals spanning recover_for_ms — one saturated interval
// restarts that streak, so recovery needs a sustained clean stretch.
func (h *HealthLoop) Observe(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, h.every)
	_, err := h.store.ListEpisodes(qctx, 1)
	cancel()
	if ctx.Err() != nil {
		return
	}
	var f Fault
	if err != nil {
		f |= DatabaseLoss
	}
	if n := h.broker.Saturations(); n != h.seen {
		f |= BrokerSaturation
		h.seen = n
	}
	h.sink.Report(DatabaseLoss|BrokerSaturation, f)
}
