package store

import (
	"context"
	"errors"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Generations: an episode's execution domains, the successive generations
// restored into each (never two live at once) and the checkpoints taken of
// them, whose lineage is the episode's current snapshot.

// Domain is an execution domain; its generations are the successive
// incarnations restored into it.
type Domain struct {
	ID        uuid.UUID
	EpisodeID uuid.UUID
	CreatedAt time.Time
}

// NewDomain records an episode's execution domain and its first
// generation under the episode's current epoch.
type NewDomain struct {
	EpisodeID uuid.UUID
	Epoch     int64
	// UnsafeLocal marks a domain whose backend isolates nothing: the
	// ledger's domain_created event says "unsafe_local": true, so no
	// reader of the ledger can take its work for contained work.
	UnsafeLocal bool
}

// Generation states.
const (
	GenerationLive      = "live"
	GenerationDestroyed = "destroyed"
)

// Generation is one incarnation of a domain.
type Generation struct {
	DomainID     uuid.UUID
	Generation   int
	Epoch        int64
	CheckpointID *uuid.UUID
	State        string
	CreatedAt    time.Time
	DestroyedAt  *time.Time
}

// NewGeneration starts the next generation of a domain whose current one is
// destroyed, optionally restored from a checkpoint.
type NewGeneration struct {
	DomainID     uuid.UUID
	Epoch        int64
	CheckpointID *uuid.UUID
}

// NewCheckpoint records a checkpoint of a domain generation; its parent is
// the episode's current checkpoint and it becomes the current one.
type NewCheckpoint struct {
	EpisodeID  uuid.UUID
	DomainID   uuid.UUID
	Generation int
	Epoch      int64
	Digest     string // "sha256:<64 hex>"
	Stable     bool
}

// Checkpoint is a digest-addressed snapshot of a domain's overlay.
type Checkpoint struct {
	ID         uuid.UUID
	EpisodeID  uuid.UUID
	DomainID   uuid.UUID
	Generation int
	Epoch      int64
	Digest     string
	ParentID   *uuid.UUID
	Stable     bool
	CreatedAt  time.Time
}

// CreateDomain records a new execution domain and its first generation.
func (p *Postgres) CreateDomain(ctx context.Context, req NewDomain) (Domain, Generation, error) {
	var d Domain
	var g Generation
	err := p.mutate(ctx, "create_domain", onEpisode(req.EpisodeID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(req.Epoch); err != nil {
			return err
		}
		d = Domain{ID: newID(), EpisodeID: m.ep.ID, CreatedAt: m.now}
		g = Generation{DomainID: d.ID, Generation: 1, Epoch: m.ep.Epoch, State: GenerationLive, CreatedAt: m.now}
		m.write(`INSERT INTO domains (id, episode_id, created_at) VALUES ($1, $2, $3)`, d.ID, d.EpisodeID, m.now)
		m.write(`INSERT INTO domain_generations (`+generationCols+`) VALUES ($1, 1, $2, NULL, 'live', $3, NULL)`,
			d.ID, g.Epoch, m.now)
		body := map[string]any{"domain_id": d.ID, "generation": 1}
		if req.UnsafeLocal {
			body["unsafe_local"] = true
		}
		m.emit("domain_created", body)
		return nil
	})
	return d, g, err
}

// Generations lists every generation of an episode's domains, oldest
// first: what a kernel starting up must prove gone.
func (p *Postgres) Generations(ctx context.Context, episodeID uuid.UUID) ([]Generation, error) {
	var out []Generation
	err := p.query(ctx, "generations", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT g.domain_id, g.generation, g.epoch, g.checkpoint_id, g.state, g.created_at, g.destroyed_at
			FROM domain_generations g JOIN domains d ON d.id = g.domain_id
			WHERE d.episode_id = $1 ORDER BY g.created_at, g.generation`, episodeID)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Generation, error) { return scanGeneration(r) })
		return err
	})
	return out, err
}

func lockCurrentGeneration(m *mtx, domainID uuid.UUID) (Generation, error) {
	g, err := scanGeneration(m.tx.QueryRow(m.ctx, `SELECT `+generationCols+` FROM domain_generations
		WHERE domain_id = $1 ORDER BY generation DESC LIMIT 1 FOR UPDATE`, domainID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Generation{}, notFound("domain")
	}
	return g, err
}

// DestroyGeneration records that a generation's domain was destroyed (its
// cgroup proven empty by the launcher). Idempotent.
func (p *Postgres) DestroyGeneration(ctx context.Context, domainID uuid.UUID, generation int) (Generation, error) {
	var out Generation
	err := p.mutate(ctx, "destroy_generation", onRow("domains", "domain", domainID), func(m *mtx) error {
		g, err := lockCurrentGeneration(m, domainID)
		if err != nil {
			return err
		}
		if g.Generation != generation {
			return protocol.Errorf(protocol.CodeIllegalTransition, "generation %d is not the domain's current one", generation)
		}
		if g.State == GenerationLive {
			g.State, g.DestroyedAt = GenerationDestroyed, &m.now
			m.write(`UPDATE domain_generations SET state = 'destroyed', destroyed_at = $3
				WHERE domain_id = $1 AND generation = $2`, domainID, generation, m.now)
			m.emit("generation_destroyed", map[string]any{"domain_id": domainID, "generation": generation})
		}
		out = g
		return nil
	})
	return out, err
}

// NewGeneration starts the next generation of a domain whose current one is
// destroyed — never two live generations at once. Restoring from a
// checkpoint makes it the episode's current snapshot; only a stable
// checkpoint of this episode may be restored.
func (p *Postgres) NewGeneration(ctx context.Context, req NewGeneration) (Generation, error) {
	var out Generation
	err := p.mutate(ctx, "new_generation", onRow("domains", "domain", req.DomainID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(req.Epoch); err != nil {
			return err
		}
		cur, err := lockCurrentGeneration(m, req.DomainID)
		if err != nil {
			return err
		}
		if cur.State != GenerationDestroyed {
			return protocol.Errorf(protocol.CodeIllegalTransition, "current generation is still live")
		}
		if req.CheckpointID != nil {
			var stable bool
			err := m.tx.QueryRow(m.ctx, `SELECT stable FROM checkpoints WHERE id = $1 AND episode_id = $2`,
				*req.CheckpointID, m.ep.ID).Scan(&stable)
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("checkpoint")
			}
			if err != nil {
				return err
			}
			if !stable {
				return invalid("only a stable checkpoint may be restored")
			}
			m.ep.CurrentCheckpoint = req.CheckpointID
		}
		out = Generation{DomainID: req.DomainID, Generation: cur.Generation + 1, Epoch: m.ep.Epoch,
			CheckpointID: req.CheckpointID, State: GenerationLive, CreatedAt: m.now}
		m.write(`INSERT INTO domain_generations (`+generationCols+`) VALUES ($1, $2, $3, $4, 'live', $5, NULL)`,
			out.DomainID, out.Generation, out.Epoch, out.CheckpointID, m.now)
		m.emit("generation_started", map[string]any{"domain_id": out.DomainID, "generation": out.Generation,
			"checkpoint_id": out.CheckpointID})
		return nil
	})
	return out, err
}

// RecordCheckpoint records a checkpoint of the domain's live generation. Its
// parent is the episode's current snapshot and it becomes the current one.
func (p *Postgres) RecordCheckpoint(ctx context.Context, req NewCheckpoint) (Checkpoint, error) {
	if !digestPattern.MatchString(req.Digest) {
		return Checkpoint{}, invalid("checkpoint digest")
	}
	var out Checkpoint
	err := p.mutate(ctx, "record_checkpoint", onEpisode(req.EpisodeID), func(m *mtx) error {
		if err := m.requireActive(); err != nil {
			return err
		}
		if err := m.requireEpoch(req.Epoch); err != nil {
			return err
		}
		var domainEpisode uuid.UUID
		if err := m.tx.QueryRow(m.ctx, `SELECT episode_id FROM domains WHERE id = $1`, req.DomainID).Scan(&domainEpisode); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("domain")
			}
			return err
		}
		if domainEpisode != m.ep.ID {
			return notFound("domain")
		}
		g, err := lockCurrentGeneration(m, req.DomainID)
		if err != nil {
			return err
		}
		if g.Generation != req.Generation || g.State != GenerationLive {
			return protocol.Errorf(protocol.CodeIllegalTransition, "generation %d is not live", req.Generation)
		}
		c := Checkpoint{ID: newID(), EpisodeID: m.ep.ID, DomainID: req.DomainID, Generation: req.Generation,
			Epoch: m.ep.Epoch, Digest: req.Digest, ParentID: m.ep.CurrentCheckpoint, Stable: req.Stable, CreatedAt: m.now}
		m.write(`INSERT INTO checkpoints (`+checkpointCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			c.ID, c.EpisodeID, c.DomainID, c.Generation, c.Epoch, c.Digest, c.ParentID, c.Stable, m.now)
		m.ep.CurrentCheckpoint = &c.ID
		m.emit("checkpoint_recorded", map[string]any{"checkpoint_id": c.ID, "digest": c.Digest,
			"parent_id": c.ParentID, "domain_id": c.DomainID, "generation": c.Generation, "stable": c.Stable})
		out = c
		return nil
	})
	return out, err
}

// MarkCheckpointStable marks a checkpoint as a repair target. Stability is
// never withdrawn.
func (p *Postgres) MarkCheckpointStable(ctx context.Context, id uuid.UUID) (Checkpoint, error) {
	var out Checkpoint
	err := p.mutate(ctx, "mark_checkpoint_stable", onRow("checkpoints", "checkpoint", id), func(m *mtx) error {
		c, err := scanCheckpoint(m.tx.QueryRow(m.ctx, `SELECT `+checkpointCols+` FROM checkpoints WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		if !c.Stable {
			c.Stable = true
			m.write(`UPDATE checkpoints SET stable = true WHERE id = $1`, id)
			m.emit("checkpoint_stable", map[string]any{"checkpoint_id": id, "digest": c.Digest})
		}
		out = c
		return nil
	})
	return out, err
}

// LatestStableCheckpoint returns the newest stable checkpoint of an episode.
func (p *Postgres) LatestStableCheckpoint(ctx context.Context, episodeID uuid.UUID) (Checkpoint, error) {
	var out Checkpoint
	err := p.query(ctx, "latest_stable_checkpoint", func(tx querier) error {
		var err error
		out, err = scanCheckpoint(tx.QueryRow(ctx, `SELECT `+checkpointCols+` FROM checkpoints
			WHERE episode_id = $1 AND stable ORDER BY created_at DESC, id DESC LIMIT 1`, episodeID))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("stable checkpoint")
		}
		return err
	})
	return out, err
}
