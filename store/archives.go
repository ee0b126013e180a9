package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// archiveChunk is the size of one stored chunk of an archive.
const archiveChunk = 1 << 20

// corrupt is an archive whose bytes are not its name.
func corrupt(format string, args ...any) error {
	return protocol.Errorf(protocol.CodeCheckpointCorrupt, "replicated archive: "+format, args...)
}

// PutArchive replicates a checkpoint archive (digest "sha256:<hex>", at
// most max bytes) from r, in one transaction: its bytes are hashed as they
// are read, and bytes that are not the digest store nothing. An archive
// already stored is not read again. Archives no active episode restores
// from any more go in the same transaction (PruneArchives).
func (p *Postgres) PutArchive(ctx context.Context, digest string, r io.Reader, max int64) error {
	if !digestPattern.MatchString(digest) || max <= 0 {
		return invalid("archive digest")
	}
	conn, err := p.pool.acquire(ctx)
	if err != nil {
		return classify("put_archive", err)
	}
	err = p.putArchive(ctx, conn, digest, r, max)
	p.pool.release(conn, !connBroken(err) && conn.PgConn().TxStatus() == 'I')
	return classify("put_archive", err)
}

func (p *Postgres) putArchive(ctx context.Context, conn *pgx.Conn, digest string, r io.Reader, max int64) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	// The header first, so a second writer of the same archive waits on
	// its key and then stores nothing.
	tag, err := tx.Exec(ctx, `INSERT INTO checkpoint_archives (digest, bytes, chunks) VALUES ($1, 0, 0) ON CONFLICT DO NOTHING`, digest)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 1 {
		h := sha256.New()
		var rows [][]any
		var total int64
		buf := make([]byte, archiveChunk)
		for {
			n, rerr := io.ReadFull(io.TeeReader(r, h), buf)
			if n > 0 {
				if total += int64(n); total > max {
					return protocol.Errorf(protocol.CodeCheckpointTooLarge, "archive over %d bytes", max)
				}
				rows = append(rows, []any{digest, len(rows), append([]byte(nil), buf[:n]...)})
			}
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				break
			}
			if rerr != nil {
				return protocol.Errorf(protocol.CodeInternal, "read archive: %w", rerr)
			}
		}
		if "sha256:"+hex.EncodeToString(h.Sum(nil)) != digest {
			return corrupt("its bytes are not %s", digest)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"checkpoint_archive_chunks"}, []string{"digest", "seq", "data"}, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE checkpoint_archives SET bytes = $2, chunks = $3 WHERE digest = $1`, digest, total, len(rows)); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, pruneArchives, digest); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// pruneArchives deletes every archive that is not the newest stable
// checkpoint of an active episode. A kernel replicates a checkpoint before
// it records it, so a stable checkpoint is never without its replica; an
// archive no checkpoint names yet is in flight and is kept for
// archiveInFlight (one a dead kernel left goes after that). $1, the one
// just stored, is kept too, and so is every setup layer a row names (the
// layer is replicated before its row is recorded: in flight meanwhile).
const pruneArchives = `DELETE FROM checkpoint_archives a WHERE a.digest <> $1
	AND (a.created_at < now() - interval '` + archiveInFlight + `'
		OR EXISTS (SELECT 1 FROM checkpoints c WHERE c.digest = a.digest))
	AND NOT EXISTS (SELECT 1 FROM setup_layers l WHERE l.digest = a.digest)
	AND a.digest NOT IN (
	SELECT DISTINCT ON (c.episode_id) c.digest FROM checkpoints c JOIN episodes e ON e.id = c.episode_id
	WHERE e.state = 'active' AND c.stable ORDER BY c.episode_id, c.created_at DESC, c.id DESC)`

// archiveInFlight bounds the time between replicating a checkpoint and
// recording it.
const archiveInFlight = "15 minutes"

// PruneArchives deletes the replicated archives no active episode would
// restore from: those of ended episodes and superseded ones.
func (p *Postgres) PruneArchives(ctx context.Context) (int64, error) {
	var n int64
	err := p.query(ctx, "prune_archives", func(q querier) error {
		return q.QueryRow(ctx, `WITH d AS (`+pruneArchives+` RETURNING 1) SELECT count(*) FROM d`, "").Scan(&n)
	})
	return n, err
}

// ReadArchive writes a replicated archive's bytes to w, in order, and
// fails with checkpoint_corrupt (after writing them) when they are not its
// digest: the caller discards what it wrote. A missing archive is
// not_found.
func (p *Postgres) ReadArchive(ctx context.Context, digest string, w io.Writer) (int64, error) {
	if !digestPattern.MatchString(digest) {
		return 0, invalid("archive digest")
	}
	var total int64
	h := sha256.New()
	err := p.query(ctx, "read_archive", func(q querier) error {
		var want int64
		var chunks int
		if err := q.QueryRow(ctx, `SELECT bytes, chunks FROM checkpoint_archives WHERE digest = $1`, digest).Scan(&want, &chunks); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("archive")
			}
			return err
		}
		rows, err := q.Query(ctx, `SELECT seq, data FROM checkpoint_archive_chunks WHERE digest = $1 ORDER BY seq`, digest)
		if err != nil {
			return err
		}
		defer rows.Close()
		seq := 0
		for rows.Next() {
			var s int
			var data []byte
			if err := rows.Scan(&s, &data); err != nil {
				return err
			}
			if s != seq {
				return corrupt("chunk %d missing", seq)
			}
			seq++
			h.Write(data)
			n, err := w.Write(data)
			total += int64(n)
			if err != nil {
				return protocol.Errorf(protocol.CodeInternal, "write archive: %w", err)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if seq != chunks || total != want {
			return corrupt("%d of %d chunks, %d of %d bytes", seq, chunks, total, want)
		}
		return nil
	})
	if err == nil && "sha256:"+hex.EncodeToString(h.Sum(nil)) != digest {
		err = corrupt("its bytes are not %s", digest)
	}
	return total, err
}
