package relay

import "sync"

// Memory bounds the bytes every relay of a kernel may hold for calls at
// once (finding 8 of issue 22): a call's request body and the response
// line its usage tracker may keep are taken from it before the body is
// read, and given back when the call ends. Per-relay bounds (calls in
// flight, connections) stop one episode; this stops many episodes
// together from filling the kernel's heap. A call that does not fit is
// refused (rate_limited), never queued.
type Memory struct {
	mu          sync.Mutex
	used, limit int64
}

// DefaultMemory is the kernel-wide bound when the kernel names none.
const DefaultMemory = 256 << 20

// NewMemory is a bound of limit bytes, shared by the relays given it.
func NewMemory(limit int64) *Memory {
	if limit <= 0 {
		limit = DefaultMemory
	}
	return &Memory{limit: limit}
}

func (m *Memory) take(n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.used+n > m.limit {
		return false
	}
	m.used += n
	return true
}

func (m *Memory) give(n int64) {
	m.mu.Lock()
	m.used -= n
	m.mu.Unlock()
}

// InUse is what calls hold now.
func (m *Memory) InUse() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}
