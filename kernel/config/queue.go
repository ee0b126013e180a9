package config

import (
	"regexp"
	"sort"
)

// Queue tunes this kernel's part of the task queue every kernel of the
// database shares (kernel/queue): how many tasks it runs at once, the
// per-project caps (across every kernel: keep them equal on each), and
// the claim lease. A task's liveness once it runs is its episode's
// ownership lease (owner_ttl_ms).
type Queue struct {
	Slots             int            `json:"slots"`
	ProjectCaps       map[string]int `json:"project_caps"`
	DefaultProjectCap int            `json:"default_project_cap"` // 0: no cap
	ClaimTTLMS        int            `json:"claim_ttl_ms"`
	IntervalMS        int            `json:"interval_ms"`
	MaxAttempts       int            `json:"max_attempts"`
	MaxTakeovers      *int           `json:"max_takeovers"`
	// ProjectBudgets are hard caps per project across every kernel, each
	// with a named emergency reserve (store.ProjectBudget): set in the
	// database at start, so give every kernel the same.
	ProjectBudgets map[string]ProjectBudget `json:"project_budgets"`
	// ReplicaMaxBytes is the largest stable checkpoint archive kept in
	// the database for another host's takeover (0: the default; -1: none
	// is kept, and a taken-over task runs again whole).
	ReplicaMaxBytes int64 `json:"replica_max_bytes"`
}

// ProjectBudget is one project's caps (absent: none on that resource) and
// the part of each only emergency-priority tasks may use.
type ProjectBudget struct {
	MaxSpendMicroUSD       *int64 `json:"max_spend_micro_usd"`
	MaxTokens              *int64 `json:"max_tokens"`
	MaxWallMS              *int64 `json:"max_wall_ms"`
	MaxEgressBytes         *int64 `json:"max_egress_bytes"`
	EmergencySpendMicroUSD int64  `json:"emergency_spend_micro_usd"`
	EmergencyTokens        int64  `json:"emergency_tokens"`
	EmergencyWallMS        int64  `json:"emergency_wall_ms"`
	EmergencyEgressBytes   int64  `json:"emergency_egress_bytes"`
}

// Queue defaults.
const (
	DefaultQueueSlots        = 4
	DefaultQueueClaimTTLMS   = 60000
	DefaultQueueIntervalMS   = 1000
	DefaultQueueMaxAttempts  = 3
	DefaultQueueMaxTakeovers = 3
	DefaultReplicaMaxBytes   = 256 << 20
)

// ProjectPattern is what a task's project may be named (the store's check).
var ProjectPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

func checkQueue(c *checker, q *Queue) {
	c.defaulted("queue.slots", &q.Slots, DefaultQueueSlots, 1, 1024)
	c.defaulted("queue.claim_ttl_ms", &q.ClaimTTLMS, DefaultQueueClaimTTLMS, 5000, 600000)
	c.defaulted("queue.interval_ms", &q.IntervalMS, DefaultQueueIntervalMS, 50, 60000)
	c.defaulted("queue.max_attempts", &q.MaxAttempts, DefaultQueueMaxAttempts, 1, 100)
	c.optional("queue.max_takeovers", q.MaxTakeovers, 0, 100)
	switch {
	case q.ReplicaMaxBytes == 0:
		q.ReplicaMaxBytes = DefaultReplicaMaxBytes
	case q.ReplicaMaxBytes < -1 || q.ReplicaMaxBytes > 1<<40:
		c.add("queue.replica_max_bytes", "must be -1 (none kept) or 1..%d", int64(1)<<40)
	}
	if q.DefaultProjectCap < 0 || q.DefaultProjectCap > 1<<20 {
		c.add("queue.default_project_cap", "must be 0..%d", 1<<20)
	}
	names := make([]string, 0, len(q.ProjectCaps))
	for p := range q.ProjectCaps {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if !ProjectPattern.MatchString(p) {
			c.add("queue.project_caps", "project %q must match %s", p, ProjectPattern)
		} else if n := q.ProjectCaps[p]; n < 1 || n > 1<<20 {
			c.add("queue.project_caps."+p, "must be 1..%d", 1<<20)
		}
	}
	names = names[:0]
	for p := range q.ProjectBudgets {
		names = append(names, p)
	}
	sort.Strings(names)
	const most = 1 << 50
	for _, p := range names {
		if !ProjectPattern.MatchString(p) {
			c.add("queue.project_budgets", "project %q must match %s", p, ProjectPattern)
			continue
		}
		b, key := q.ProjectBudgets[p], "queue.project_budgets."+p
		for _, r := range []struct {
			name      string
			max       *int64
			emergency int64
		}{{"spend_micro_usd", b.MaxSpendMicroUSD, b.EmergencySpendMicroUSD}, {"tokens", b.MaxTokens, b.EmergencyTokens},
			{"wall_ms", b.MaxWallMS, b.EmergencyWallMS}, {"egress_bytes", b.MaxEgressBytes, b.EmergencyEgressBytes}} {
			switch {
			case r.max != nil && (*r.max < 0 || *r.max > most):
				c.add(key+".max_"+r.name, "must be 0..%d", int64(most))
			case r.emergency < 0 || r.emergency > most:
				c.add(key+".emergency_"+r.name, "must be 0..%d", int64(most))
			case r.max != nil && r.emergency > *r.max:
				c.add(key+".emergency_"+r.name, "must not exceed max_%s", r.name)
			}
		}
	}
}

// MaxTakeoversValue is max_takeovers, defaulted.
func (q Queue) MaxTakeoversValue() int {
	if q.MaxTakeovers == nil {
		return DefaultQueueMaxTakeovers
	}
	return *q.MaxTakeovers
}
