package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store/ledger"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// scanEpisode scans episodeCols (withSpec) or episodeLockCols, then extra.
func scanEpisode(row pgx.Row, withSpec bool, extra ...any) (Episode, error) {
	var ep Episode
	var state string
	var head []byte
	var dest []any
	var process *uuid.UUID
	if withSpec {
		dest = append(dest, &ep.Spec)
	}
	dest = append(dest, &ep.ID, &state, &ep.Epoch, &ep.PolicyVersion, &ep.CurrentCheckpoint,
		&ep.Owner.InstanceID, &ep.Owner.Token, &ep.Owner.ExpiresAt, &ep.LedgerHead.Seq, &head,
		&ep.CreatedAt, &ep.UpdatedAt, &process)
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return Episode{}, err
	}
	if process != nil {
		ep.Owner.Process = *process
	}
	ep.State = EpisodeState(state)
	ep.Owner.EpisodeID = ep.ID
	if len(head) != len(ep.LedgerHead.Hash) {
		return Episode{}, fmt.Errorf("store: ledger head has %d bytes", len(head))
	}
	copy(ep.LedgerHead.Hash[:], head)
	ep.Owner.ExpiresAt = ep.Owner.ExpiresAt.UTC()
	return ep, nil
}

const effectCols = `id, episode_id, lease_id, kind, class, state, revision, epoch, target_id, target,
	payload_digest, version_vector, expires_at, created_at, updated_at, commit_intent_at, outcome_at, receipt, outside_lease`

// effectColsNoVector is effectCols with the version vector read as NULL,
// for the reads that never compare it: only the commit horizon does, from
// the row it locks, and decoding it strictly is most of a row's scan.
const effectColsNoVector = `id, episode_id, lease_id, kind, class, state, revision, epoch, target_id, target,
	payload_digest, NULL::jsonb, expires_at, created_at, updated_at, commit_intent_at, outcome_at, receipt, outside_lease`

func scanEffect(row pgx.Row) (Effect, error) {
	var e Effect
	var state string
	var class int16
	var vv []byte
	var outside *string
	err := row.Scan(&e.ID, &e.EpisodeID, &e.LeaseID, &e.Kind, &class, &state, &e.Revision, &e.Epoch,
		&e.TargetID, &e.Target, &e.PayloadDigest, &vv, &e.ExpiresAt, &e.CreatedAt, &e.UpdatedAt,
		&e.CommitIntentAt, &e.OutcomeAt, &e.Receipt, &outside)
	if err != nil {
		return Effect{}, err
	}
	if outside != nil {
		e.OutsideLease = *outside
	}
	e.Class = int(class)
	if e.State, err = parseState(state); err != nil {
		return Effect{}, err
	}
	if vv != nil {
		v, err := DecodeVersionVector(vv)
		if err != nil {
			return Effect{}, err
		}
		e.VersionVector = &v
	}
	return e, nil
}

// DecodeVersionVector strictly decodes a stored version vector through the
// project's one strict-JSON reader: one object, no duplicate key, no key
// that is not exactly a field's name (encoding/json alone would let
// {"epoch":1,"Epoch":5} set the epoch twice), nothing after it, and the
// identity present, because a vector that decodes loosely could compare
// equal to one it is not.
func DecodeVersionVector(raw []byte) (VersionVector, error) {
	var v VersionVector
	if err := ledger.CheckObject(raw); err != nil {
		return VersionVector{}, fmt.Errorf("store: version vector: %w", err)
	}
	if err := protocol.DecodeStrict(raw, &v); err != nil {
		return VersionVector{}, fmt.Errorf("store: version vector: %w", err)
	}
	if v.EpisodeID == uuid.Nil || v.LeaseID == uuid.Nil || v.Epoch < 1 || v.EffectRevision < 1 || v.PolicyVersion < 0 {
		return VersionVector{}, fmt.Errorf("store: version vector: missing identity")
	}
	return v, nil
}

const leaseCols = `id, episode_id, epoch, capabilities, created_at, expires_at, revoked_at, revoke_reason`

func scanLease(row pgx.Row) (Lease, error) {
	var l Lease
	var reason *string
	if err := row.Scan(&l.ID, &l.EpisodeID, &l.Epoch, &l.Capabilities, &l.CreatedAt, &l.ExpiresAt, &l.RevokedAt, &reason); err != nil {
		return Lease{}, err
	}
	if reason != nil {
		l.RevokeReason = *reason
	}
	return l, nil
}

// live reports whether the lease may back an action in epoch at now.
func (l Lease) live(epoch int64, now time.Time) error {
	switch {
	case l.RevokedAt != nil:
		return stale("lease revoked (%s)", l.RevokeReason)
	case l.Epoch != epoch:
		return stale("lease epoch %d, current %d", l.Epoch, epoch)
	case !now.Before(l.ExpiresAt):
		return stale("lease expired")
	}
	return nil
}

const checkpointCols = `id, episode_id, domain_id, generation, epoch, digest, parent_id, stable, created_at`

func scanCheckpoint(row pgx.Row) (Checkpoint, error) {
	var c Checkpoint
	err := row.Scan(&c.ID, &c.EpisodeID, &c.DomainID, &c.Generation, &c.Epoch, &c.Digest, &c.ParentID, &c.Stable, &c.CreatedAt)
	return c, err
}

const generationCols = `domain_id, generation, epoch, checkpoint_id, state, created_at, destroyed_at`

func scanGeneration(row pgx.Row) (Generation, error) {
	var g Generation
	err := row.Scan(&g.DomainID, &g.Generation, &g.Epoch, &g.CheckpointID, &g.State, &g.CreatedAt, &g.DestroyedAt)
	return g, err
}

const decisionCols = `id, effect_id, revision, epoch, kind, verdict, body, key_id, signature, created_at`

func scanDecision(row pgx.Row) (Decision, error) {
	var d Decision
	var key *string
	err := row.Scan(&d.ID, &d.EffectID, &d.Revision, &d.Epoch, &d.Kind, &d.Verdict, &d.Body, &key, &d.Signature, &d.CreatedAt)
	if key != nil {
		d.KeyID = *key
	}
	return d, err
}

const lineageCols = `id, episode_id, from_epoch, to_epoch, checkpoint_id, reason, created_at`

func scanLineage(row pgx.Row) (Lineage, error) {
	var l Lineage
	err := row.Scan(&l.ID, &l.EpisodeID, &l.FromEpoch, &l.ToEpoch, &l.CheckpointID, &l.Reason, &l.CreatedAt)
	return l, err
}

func newID() uuid.UUID {
	// v7: time-ordered, so indexes on ids stay append-mostly.
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.New()
	}
	return id
}
