package api

import (
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/ledger"
)

// Wire views: what the API answers. Field names are the contract with the
// operator commands (and with scripts using --json).

// EpisodeView is an episode's store record, plus the controller's live view
// when this kernel drives it.
type EpisodeView struct {
	ID                string          `json:"id"`
	State             string          `json:"state"`
	Epoch             int64           `json:"epoch"`
	PolicyVersion     int64           `json:"policy_version"`
	CurrentCheckpoint string          `json:"current_checkpoint,omitempty"`
	Owner             string          `json:"owner"`
	OwnerExpiresAt    time.Time       `json:"owner_expires_at"`
	LedgerSeq         int64           `json:"ledger_seq"`
	LedgerHead        string          `json:"ledger_head"`
	CreatedAt         time.Time       `json:"created_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
	Spec              json.RawMessage `json:"spec,omitempty"`
	Live              *LiveView       `json:"live,omitempty"`
	// Outcome is how an ended episode ended by itself (harvest or wall
	// time: kernel/episode.Outcome), on GET /v1/episodes/{id} only.
	Outcome *episode.Outcome `json:"outcome,omitempty"`
}

// LiveView is the controller's in-memory view of an episode it drives.
// It is never authority: the store's fields above are.
type LiveView struct {
	State      string `json:"state"`
	Why        string `json:"why,omitempty"`
	Epoch      int64  `json:"epoch"`
	LeaseID    string `json:"lease_id"`
	DomainID   string `json:"domain_id"`
	Generation int    `json:"generation"`
	Repairs    int    `json:"repairs"`
	// UnsafeLocal: the worker runs with NO isolation (the unsafe_local
	// development backend).
	UnsafeLocal bool `json:"unsafe_local,omitempty"`
}

// EffectView is an effect's record at its current revision.
type EffectView struct {
	ID             string               `json:"id"`
	EpisodeID      string               `json:"episode_id"`
	LeaseID        string               `json:"lease_id"`
	Kind           string               `json:"kind"`
	Class          int                  `json:"class"`
	State          string               `json:"state"`
	Revision       int                  `json:"revision"`
	Epoch          int64                `json:"epoch"`
	TargetID       string               `json:"target_id"`
	Target         json.RawMessage      `json:"target,omitempty"`
	PayloadDigest  string               `json:"payload_digest"`
	VersionVector  *store.VersionVector `json:"version_vector,omitempty"`
	ExpiresAt      *time.Time           `json:"expires_at,omitempty"`
	CreatedAt      time.Time            `json:"created_at"`
	UpdatedAt      time.Time            `json:"updated_at"`
	CommitIntentAt *time.Time           `json:"commit_intent_at,omitempty"`
	OutcomeAt      *time.Time           `json:"outcome_at,omitempty"`
	Receipt        json.RawMessage      `json:"receipt,omitempty"`
	// OutsideLease is what the lease lacks for an effect proposed outside
	// it (broker.escalate_outside_lease), which waits on a human.
	OutsideLease string `json:"outside_lease,omitempty"`
	// Decisions (effect show only): every decision on the effect, all
	// revisions — verification, the semantic bank's readings with the
	// sensor's identity, human approvals (their signed bytes stay in the
	// store).
	Decisions []DecisionView `json:"decisions,omitempty"`
}

// EventView is one ledger entry.
type EventView struct {
	Seq   int64           `json:"seq"`
	Epoch int64           `json:"epoch"`
	Kind  string          `json:"kind"`
	Body  json.RawMessage `json:"body"`
	At    time.Time       `json:"at"`
	Prev  string          `json:"prev"`
	Hash  string          `json:"hash"`
}

// VerifyView is a ledger verification.
type VerifyView struct {
	EpisodeID string `json:"episode_id"`
	OK        bool   `json:"ok"`
	Entries   int    `json:"entries"`
	HeadSeq   int64  `json:"head_seq"`
	HeadHash  string `json:"head_hash"`
	BrokenAt  *int64 `json:"broken_at,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// Check is one preflight line.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// PreflightView is the kernel's own preflight: the host report from the
// domain backend plus the database's reachability.
type PreflightView struct {
	Verdict string                    `json:"verdict"` // ok | degraded | refused
	Checks  []Check                   `json:"checks"`
	Host    *protocol.PreflightReport `json:"host,omitempty"`
}

// ErrorView is every error answer's body.
type ErrorView struct {
	Error protocol.Error `json:"error"`
}

func hexHash(h ledger.Hash) string { return hex.EncodeToString(h[:]) }

func episodeView(e store.Episode) EpisodeView {
	v := EpisodeView{ID: e.ID.String(), State: string(e.State), Epoch: e.Epoch, PolicyVersion: e.PolicyVersion,
		Owner: e.Owner.InstanceID, OwnerExpiresAt: e.Owner.ExpiresAt, LedgerSeq: e.LedgerHead.Seq,
		LedgerHead: hexHash(e.LedgerHead.Hash), CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, Spec: e.Spec}
	if e.CurrentCheckpoint != nil {
		v.CurrentCheckpoint = e.CurrentCheckpoint.String()
	}
	return v
}

// DecisionView is one recorded decision.
type DecisionView struct {
	Revision int             `json:"revision"`
	Epoch    int64           `json:"epoch"`
	Kind     string          `json:"kind"`
	Verdict  string          `json:"verdict"`
	KeyID    string          `json:"key_id,omitempty"`
	Body     json.RawMessage `json:"body,omitempty"`
	At       time.Time       `json:"at"`
}

func decisionView(d store.Decision) DecisionView {
	return DecisionView{Revision: d.Revision, Epoch: d.Epoch, Kind: d.Kind, Verdict: d.Verdict, KeyID: d.KeyID, Body: d.Body, At: d.CreatedAt}
}

func effectView(e store.Effect) EffectView {
	return EffectView{ID: e.ID.String(), EpisodeID: e.EpisodeID.String(), LeaseID: e.LeaseID.String(), Kind: e.Kind,
		Class: e.Class, State: string(e.State), Revision: e.Revision, Epoch: e.Epoch, TargetID: e.TargetID,
		Target: e.Target, PayloadDigest: e.PayloadDigest, VersionVector: e.VersionVector, ExpiresAt: e.ExpiresAt,
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, CommitIntentAt: e.CommitIntentAt, OutcomeAt: e.OutcomeAt,
		Receipt: e.Receipt, OutsideLease: e.OutsideLease}
}

func eventView(e ledger.Entry) EventView {
	return EventView{Seq: e.Seq, Epoch: e.Epoch, Kind: e.Kind, Body: e.Body, At: e.At, Prev: hexHash(e.Prev), Hash: hexHash(e.Hash)}
}

// EgressView is one row of an episode's egress fetch ledger
// (store.EgressFetch): outcome fetched (from upstream), cached (served
// from the host's cache), refused or failed.
type EgressView struct {
	Kind       string    `json:"kind"`
	Method     string    `json:"method"`
	Host       string    `json:"host"`
	Path       string    `json:"path,omitempty"`
	Outcome    string    `json:"outcome"`
	Code       string    `json:"code,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Status     int       `json:"status"`
	Bytes      int64     `json:"bytes"`
	BytesUp    int64     `json:"bytes_up,omitempty"`
	SHA256     string    `json:"sha256,omitempty"`
	DurationMS int64     `json:"duration_ms"`
	At         time.Time `json:"at"`
}
