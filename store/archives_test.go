package store

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

func archiveDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestArchiveReplication: a checkpoint archive replicated to the database
// reads back byte for byte; bytes that are not their name, or over the
// cap, store nothing; a chunk tampered with in the database is
// checkpoint_corrupt on read; and only the newest stable checkpoint of an
// active episode is kept.
func TestArchiveReplication(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	body := make([]byte, 2*archiveChunk+12345)
	_, _ = rand.Read(body)
	d := archiveDigest(body)
	if err := s.PutArchive(ctx, d, bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	// Stored once: a second put does not read its reader.
	if err := s.PutArchive(ctx, d, bytes.NewReader(nil), 1); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if n, err := s.ReadArchive(ctx, d, &got); err != nil || n != int64(len(body)) || !bytes.Equal(got.Bytes(), body) {
		t.Fatalf("read back %d bytes, equal %v: %v", n, bytes.Equal(got.Bytes(), body), err)
	}

	other := []byte("other bytes")
	wantCode(t, s.PutArchive(ctx, archiveDigest([]byte("not these")), bytes.NewReader(other), 100), protocol.CodeCheckpointCorrupt)
	_, err := s.ReadArchive(ctx, archiveDigest([]byte("not these")), &bytes.Buffer{})
	wantCode(t, err, protocol.CodeNotFound)
	wantCode(t, s.PutArchive(ctx, archiveDigest(other), bytes.NewReader(other), 5), protocol.CodeCheckpointTooLarge)
	_, err = s.ReadArchive(ctx, archiveDigest(other), &bytes.Buffer{})
	wantCode(t, err, protocol.CodeNotFound)
	wantCode(t, s.PutArchive(ctx, "sha256:xyz", bytes.NewReader(other), 100), protocol.CodeInvalidField)

	// The database is not trusted with the bytes either.
	admin := e.admin()
	if _, err := admin.Exec(ctx, `UPDATE checkpoint_archive_chunks SET data = '\x00' WHERE digest = $1 AND seq = 1`, d); err != nil {
		t.Fatal(err)
	}
	_, err = s.ReadArchive(ctx, d, &bytes.Buffer{})
	wantCode(t, err, protocol.CodeCheckpointCorrupt)
	if _, err := admin.Exec(ctx, `DELETE FROM checkpoint_archive_chunks WHERE digest = $1 AND seq = 2`, d); err != nil {
		t.Fatal(err)
	}
	_, err = s.ReadArchive(ctx, d, &bytes.Buffer{})
	wantCode(t, err, protocol.CodeCheckpointCorrupt)

	// Pruning keeps the newest stable checkpoint of an active episode, and
	// an archive no checkpoint names yet while it may be in flight (a
	// kernel replicates before it records), and nothing else.
	f := e.episode(s)
	dom, _, err := s.CreateDomain(ctx, NewDomain{EpisodeID: f.ep.ID, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	old, newest, flight := []byte("generation 1 base"), []byte("after the first commit"), []byte("replicated, not recorded")
	for _, b := range [][]byte{old, newest} {
		if err := s.PutArchive(ctx, archiveDigest(b), bytes.NewReader(b), 100); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordCheckpoint(ctx, NewCheckpoint{EpisodeID: f.ep.ID, DomainID: dom.ID, Generation: 1, Epoch: 1, Digest: archiveDigest(b), Stable: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutArchive(ctx, archiveDigest(flight), bytes.NewReader(flight), 100); err != nil {
		t.Fatal(err)
	}
	// The last put pruned old; d, tampered and named by no checkpoint, is
	// in flight until it is old.
	if n, err := s.PruneArchives(ctx); err != nil || n != 0 {
		t.Fatalf("prune with the newest and the ones in flight kept: %d, %v", n, err)
	}
	for b, want := range map[string]protocol.Code{string(old): protocol.CodeNotFound, string(newest): "", string(flight): ""} {
		_, err := s.ReadArchive(ctx, archiveDigest([]byte(b)), &bytes.Buffer{})
		wantCode(t, err, want)
	}
	if _, err := admin.Exec(ctx, `UPDATE checkpoint_archives SET created_at = now() - interval '16 minutes' WHERE digest IN ($1, $2)`,
		archiveDigest(flight), d); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneArchives(ctx); err != nil || n != 2 {
		t.Fatalf("prune of the ones left in flight: %d, %v", n, err)
	}
	_, err = s.ReadArchive(ctx, archiveDigest(flight), &bytes.Buffer{})
	wantCode(t, err, protocol.CodeNotFound)
	if _, err := s.EndEpisode(ctx, EndEpisode{EpisodeID: f.ep.ID, Epoch: 1, State: EpisodeCompleted, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneArchives(ctx); err != nil || n != 1 {
		t.Fatalf("prune after the episode ended: %d, %v", n, err)
	}
	_, err = s.ReadArchive(ctx, archiveDigest(newest), &bytes.Buffer{})
	wantCode(t, err, protocol.CodeNotFound)
}
