package broker

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
)

// Outcome is what an adapter can say about an effect it was asked to
// perform or reconcile.
type Outcome int

// Outcomes. Unknown is the honest answer whenever the adapter may have
// acted but cannot prove it from the target's evidence.
const (
	NotCommitted Outcome = iota
	Committed
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "committed"
	case NotCommitted:
		return "not_committed"
	}
	return "unknown"
}

// Request is one effect revision as an adapter sees it: the worker's
// target-relative request and payload, and the identity that makes a
// commit recognisable on the target.
type Request struct {
	EffectID      uuid.UUID
	Revision      int
	Epoch         int64
	TargetID      string
	Target        json.RawMessage
	Payload       []byte
	PayloadDigest string
	// MaxBytes, at prepare, is the lease's budget.bytes_per_effect (0:
	// none); an adapter that can measure what an effect adds refuses more.
	MaxBytes int64
}

// Result is an adapter's answer. Receipt is the target's evidence; it is
// shown to the worker and so never holds a host path, URL or credential.
// Err, for NotCommitted and Unknown, carries the catalogue code the worker
// is answered with.
type Result struct {
	Outcome Outcome
	Receipt map[string]any
	Err     error
}

// Adapter performs one kind of effect (ARCHITECTURE §5). Implementations
// hold their trusted target configuration; a target id they do not know is
// forbidden.
type Adapter interface {
	// Kind is the effect kind the adapter serves.
	Kind() string
	// Class is the effect class of kind on targetID.
	Class(targetID string) (int, error)
	// Validate checks a request against trusted configuration, without
	// side effects on the target.
	Validate(ctx context.Context, r Request) error
	// Precondition is commit check 9. It runs inside the store's commit
	// transaction with the episode locked: quick, read-only on the
	// target.
	Precondition(ctx context.Context, r Request) error
	// Commit performs the effect, at most once per call.
	Commit(ctx context.Context, r Request) Result
	// Reconcile settles an effect that may have been committed, from the
	// target's own evidence only. It never performs the effect, and it
	// never needs the payload's bytes (r.Payload is nil when the effect
	// was prepared on another host); r.PayloadDigest is always set.
	Reconcile(ctx context.Context, r Request) Result
}

func committed(receipt map[string]any) Result { return Result{Outcome: Committed, Receipt: receipt} }

func notCommitted(err error, receipt map[string]any) Result {
	return Result{Outcome: NotCommitted, Err: err, Receipt: receipt}
}

func unknown(err error, receipt map[string]any) Result {
	return Result{Outcome: Unknown, Err: err, Receipt: receipt}
}
