package broker

import (
	"context"
	"encoding/json"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
	"github.com/tidwall/gjson"
)

// LeaseQuery is one effect as the whole-lease check sees it at the commit
// horizon: the lease document re-read under the lease's lock, what the
// effect is, every path it actually touches, its size, and the episode's
// durable spend read in the same transaction.
type LeaseQuery struct {
	EpisodeID uuid.UUID
	Lease     json.RawMessage
	Kind      string
	TargetID  string
	Class     int
	// Touches are the effect's actual paths (the resulting tree's diff for
	// git_commit), nil for an effect that names none.
	Touches []Touch
	Bytes   int64
	Spent   store.Spend
	// Ref is the ref the effect names (EffectRef), "" for none.
	Ref string
	// OutsideLease: the effect is outside the lease and commits only with
	// its approved Action (checked apart): the grant is not asked.
	OutsideLease bool
}

// EffectRef is the ref an effect's target document names (the git kinds'
// "ref"), "" when it names none: what a grant's refs are checked against.
func EffectRef(target json.RawMessage) string {
	return gjson.GetBytes(target, "ref").String()
}

// Touch is one path an effect changes.
type Touch struct {
	Path string
	// Executable: the change leaves Path executable where it was not.
	Executable bool
}

// LeaseCheck decides a LeaseQuery (Config.LeaseCheck): kind, target,
// class, every touched path against the lease's allow and forbid rules,
// bytes per effect, bytes in total and effects per minute from the
// durable spend. It runs inside BeginCommit with the episode, effect and
// lease locked, for every class, whether or not automatic verification is
// on. The kernel supplies it (the authority algebra lives there); refusals
// are catalogue errors (forbidden, limit_exceeded, rate_limited).
type LeaseCheck func(ctx context.Context, q LeaseQuery) error

// Toucher is an adapter whose effects change paths: it reports the paths
// an effect would change, without changing anything the target keeps.
type Toucher interface {
	Touches(ctx context.Context, r Request) ([]Touch, error)
}

// touches are the effect's actual paths, computed before the commit
// transaction (they depend only on the digest-bound payload, and the
// check under the locks must stay quick).
func (b *Broker) touches(ctx context.Context, a Adapter, r Request) ([]Touch, error) {
	t, ok := unwrap(a).(Toucher)
	if !ok {
		return nil, nil
	}
	return t.Touches(ctx, r)
}

// unwrap reaches an adapter a wrapper (the kernel's observer) holds.
func unwrap(a Adapter) Adapter {
	for {
		w, ok := a.(interface{ Unwrap() Adapter })
		if !ok {
			return a
		}
		a = w.Unwrap()
	}
}

// leaseCheck is the whole-lease check of the commit horizon. Without a
// configured LeaseCheck nothing commits: a broker that cannot read the
// lease's rules must not act as if it had none.
func (b *Broker) leaseCheck(ctx context.Context, v store.CommitView, touches []Touch, bytes int64) error {
	if b.cfg.LeaseCheck == nil {
		return protocol.Errorf(protocol.CodeForbidden, "no lease check is configured")
	}
	e := v.Effect
	return b.cfg.LeaseCheck(ctx, LeaseQuery{EpisodeID: e.EpisodeID, Lease: v.Lease.Capabilities, Kind: e.Kind,
		TargetID: e.TargetID, Class: e.Class, Touches: touches, Bytes: bytes, Spent: v.Spent, Ref: EffectRef(e.Target),
		OutsideLease: e.OutsideLease != ""})
}
