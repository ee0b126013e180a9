package broker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
)

// Quota bounds what one episode's worker can make the broker do and keep,
// enforced at prepare before the adapter runs. Zero fields take the
// defaults.
type Quota struct {
	// PreparesPerEpisode caps prepares (new effects and revisions) over an
	// episode's life (default 2000).
	PreparesPerEpisode int64
	// PreparesPerMinute caps prepares in any sliding minute (default 120).
	PreparesPerMinute int
	// PayloadBytesPerEpisode caps the payload bytes stored for an episode
	// (default 256 MiB).
	PayloadBytesPerEpisode int64
	// DiskReserveBytes is the free space the payload store's filesystem
	// keeps: a payload that would cross it is refused (default 1 GiB).
	DiskReserveBytes int64
	// Retention is how long the payloads (and http_read bodies) of settled
	// effects and ended episodes are kept (default 7 days).
	Retention time.Duration
}

// Quota defaults.
const (
	DefaultPreparesPerEpisode     = 2000
	DefaultPreparesPerMinute      = 120
	DefaultPayloadBytesPerEpisode = 256 << 20
	DefaultDiskReserveBytes       = 1 << 30
	DefaultRetention              = 7 * 24 * time.Hour
)

func (q Quota) withDefaults() Quota {
	if q.PreparesPerEpisode <= 0 {
		q.PreparesPerEpisode = DefaultPreparesPerEpisode
	}
	if q.PreparesPerMinute <= 0 {
		q.PreparesPerMinute = DefaultPreparesPerMinute
	}
	if q.PayloadBytesPerEpisode <= 0 {
		q.PayloadBytesPerEpisode = DefaultPayloadBytesPerEpisode
	}
	if q.DiskReserveBytes == 0 {
		q.DiskReserveBytes = DefaultDiskReserveBytes
	}
	if q.Retention <= 0 {
		q.Retention = DefaultRetention
	}
	return q
}

// UsageStore is what the store offers the quotas and the retention sweep
// (store.Postgres implements it).
type UsageStore interface {
	// PrepareUsage is how many prepares an episode's effects record and
	// the payload digests they name.
	PrepareUsage(ctx context.Context, episodeID uuid.UUID) (prepares int64, digests []string, err error)
	// HeldPayloads are the digests (payloads and response bodies) of
	// effects not yet settled, of effects of active episodes that may
	// still move, and of anything that changed after cutoff.
	HeldPayloads(ctx context.Context, cutoff time.Time) (map[string]bool, error)
}

// quotas is the broker's per-episode accounting. It starts from what the
// store records, so a restarted broker does not forget an episode's use.
type quotas struct {
	mu       sync.Mutex
	episodes map[uuid.UUID]*usage
}

type usage struct {
	prepares int64
	bytes    int64
	digests  map[string]bool
	recent   []time.Time
	pending  int64 // bytes admitted, not yet stored or released
}

func (q *quotas) load(ctx context.Context, b *Broker, episodeID uuid.UUID) (*usage, error) {
	if u, ok := q.episodes[episodeID]; ok {
		return u, nil
	}
	u := &usage{digests: map[string]bool{}}
	if us, ok := b.cfg.Store.(UsageStore); ok {
		n, digests, err := us.PrepareUsage(ctx, episodeID)
		if err != nil {
			return nil, err
		}
		u.prepares = n
		for _, d := range digests {
			if path, err := b.cfg.Payloads.path(d); err == nil && !u.digests[d] {
				if fi, err := os.Stat(path); err == nil {
					u.bytes += fi.Size()
				}
				u.digests[d] = true
			}
		}
	}
	if q.episodes == nil {
		q.episodes = map[uuid.UUID]*usage{}
	}
	q.episodes[episodeID] = u
	return u, nil
}

// admit counts one prepare of a payload of size bytes against the
// episode's quotas, or refuses it. release(stored) settles the bytes: kept
// against the quota if the payload was stored, returned if not. A refused
// prepare still counts against the rate and the count: refusing is work.
func (q *quotas) admit(ctx context.Context, b *Broker, episodeID uuid.UUID, digest string, size int64) (func(stored bool), error) {
	lim := b.cfg.Quota.withDefaults()
	q.mu.Lock()
	defer q.mu.Unlock()
	u, err := q.load(ctx, b, episodeID)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	u.recent = slices.DeleteFunc(u.recent, func(at time.Time) bool { return now.Sub(at) >= time.Minute })
	switch {
	case u.prepares >= lim.PreparesPerEpisode:
		return nil, protocol.Errorf(protocol.CodeLimitExceeded, "episode quota: %d prepares", lim.PreparesPerEpisode)
	case len(u.recent) >= lim.PreparesPerMinute:
		return nil, protocol.Errorf(protocol.CodeRateLimited, "episode quota: %d prepares a minute", lim.PreparesPerMinute)
	}
	add := size
	if u.digests[digest] {
		add = 0
	}
	if u.bytes+u.pending+add > lim.PayloadBytesPerEpisode {
		return nil, protocol.Errorf(protocol.CodeLimitExceeded, "episode quota: %d payload bytes", lim.PayloadBytesPerEpisode)
	}
	u.prepares++
	u.recent = append(u.recent, now)
	u.pending += add
	return func(stored bool) {
		q.mu.Lock()
		defer q.mu.Unlock()
		u.pending -= add
		if stored && !u.digests[digest] {
			u.digests[digest] = true
			u.bytes += size
		}
	}, nil
}

// forget drops the accounting of episodes that prepared nothing since
// cutoff (ended ones, mostly), so it does not grow with every episode ever
// run; the store's record seeds it again if the episode is ever heard
// from. An active episode keeps its count (stored bytes included: the
// quota is on what an episode ever stored) and its rate window.
func (q *quotas) forget(cutoff time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for id, u := range q.episodes {
		if u.pending == 0 && (len(u.recent) == 0 || u.recent[len(u.recent)-1].Before(cutoff)) {
			delete(q.episodes, id)
		}
	}
}

// SweepPayloads deletes every stored payload and response body older than
// the retention period that no effect still holds (see
// UsageStore.HeldPayloads): the payloads of settled effects and of ended
// episodes, once their retention has passed. It returns how many files it
// removed.
func (b *Broker) SweepPayloads(ctx context.Context, now time.Time) (int, error) {
	us, ok := b.cfg.Store.(UsageStore)
	if !ok {
		return 0, errors.New("broker: the store cannot report held payloads")
	}
	cutoff := now.Add(-b.cfg.Quota.withDefaults().Retention)
	held, err := us.HeldPayloads(ctx, cutoff)
	if err != nil {
		return 0, err
	}
	n, err := b.cfg.Payloads.sweep(held, cutoff)
	b.quotas.forget(cutoff)
	if n > 0 {
		b.log.Info("payload retention", "removed", n)
	}
	return n, err
}

// RunRetention sweeps every interval until ctx ends.
func (b *Broker) RunRetention(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := b.SweepPayloads(ctx, time.Now()); err != nil && ctx.Err() == nil {
			b.log.Warn("payload retention sweep", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leaseBytesPerEffect reads budget.bytes_per_effect from a lease's
// capability document (0 when it has none).
func leaseBytesPerEffect(raw json.RawMessage) int64 {
	var d struct {
		Budget *struct {
			BytesPerEffect int64 `json:"bytes_per_effect"`
		} `json:"budget"`
	}
	if json.Unmarshal(raw, &d) != nil || d.Budget == nil || d.Budget.BytesPerEffect <= 0 {
		return 0
	}
	return d.Budget.BytesPerEffect
}
