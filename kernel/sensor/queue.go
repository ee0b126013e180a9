package sensor

import (
	"context"
	"fmt"
	"sync"
)

// QueueError is a refused push; a constant type, so it cannot be
// reassigned and errors.Is works.
type QueueError string

func (e QueueError) Error() string { return "sensor queue: " + string(e) }

// ErrCriticalBacklog: the queue is full of critical frames, so there is no
// semantic frame left to drop. The frame was not queued; the caller must
// contain the episode (a flood of kernel denials is itself containment).
const ErrCriticalBacklog QueueError = "full of critical frames"

// Queue is the bounded sensor queue (sensor_queue). Critical frames
// (deterministic kernel evidence: violations, denials) are served first and
// are never dropped to make room; semantic frames are dropped, oldest
// first, when a critical frame needs their place, and refused when the
// queue is full. Every dropped semantic frame is counted.
type Queue[T any] struct {
	mu       sync.Mutex
	capacity int
	critical []T
	semantic []T
	dropped  uint64
	ready    chan struct{} // one token: "something may be queued"
}

// QueueStats is a snapshot of the queue.
type QueueStats struct {
	Critical int
	Semantic int
	Dropped  uint64 // semantic frames dropped since the queue was made
}

// NewQueue returns a queue holding at most capacity frames.
func NewQueue[T any](capacity int) (*Queue[T], error) {
	if capacity < 1 || capacity > 1<<16 {
		return nil, fmt.Errorf("sensor_queue %d outside 1..65536", capacity)
	}
	return &Queue[T]{capacity: capacity, ready: make(chan struct{}, 1)}, nil
}

// PushCritical queues a critical frame, dropping the oldest semantic frame
// if the queue is full. It fails only when every slot already holds a
// critical frame.
func (q *Queue[T]) PushCritical(x T) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.critical)+len(q.semantic) >= q.capacity {
		if len(q.semantic) == 0 {
			return ErrCriticalBacklog
		}
		q.semantic = dropFirst(q.semantic)
		q.dropped++
	}
	q.critical = append(q.critical, x)
	q.signal()
	return nil
}

// PushSemantic queues a semantic frame if there is room, and reports
// whether it did; a refused frame is counted as dropped.
func (q *Queue[T]) PushSemantic(x T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.critical)+len(q.semantic) >= q.capacity {
		q.dropped++
		return false
	}
	q.semantic = append(q.semantic, x)
	q.signal()
	return true
}

// Pop waits for a frame, critical ones first, until ctx is done.
func (q *Queue[T]) Pop(ctx context.Context) (x T, critical bool, err error) {
	for {
		q.mu.Lock()
		switch {
		case len(q.critical) > 0:
			x, critical = q.critical[0], true
			q.critical = dropFirst(q.critical)
		case len(q.semantic) > 0:
			x = q.semantic[0]
			q.semantic = dropFirst(q.semantic)
		default:
			q.mu.Unlock()
			select {
			case <-q.ready:
				continue
			case <-ctx.Done():
				return x, false, ctx.Err()
			}
		}
		if len(q.critical)+len(q.semantic) > 0 {
			q.signal() // wake another consumer for what is left
		}
		q.mu.Unlock()
		return x, critical, nil
	}
}

// Stats returns a snapshot of the queue.
func (q *Queue[T]) Stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return QueueStats{Critical: len(q.critical), Semantic: len(q.semantic), Dropped: q.dropped}
}

func (q *Queue[T]) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// dropFirst removes s[0] without keeping the backing array's head alive
// forever: the slice is compacted, bounded by the capacity anyway.
func dropFirst[T any](s []T) []T {
	var zero T
	copy(s, s[1:])
	s[len(s)-1] = zero
	return s[:len(s)-1]
}
