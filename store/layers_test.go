package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestSetupLayers: a layer recorded under its key reads back (and is
// marked used); recording more than keep evicts the least recently used,
// returned so their holds can go; a key recorded again with other bytes
// returns the old layer; and a layer's replicated archive survives
// pruning exactly as long as a row names it.
func TestSetupLayers(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	key := func(i int) string {
		sum := sha256.Sum256(fmt.Appendf(nil, "key %d", i))
		return hex.EncodeToString(sum[:])
	}
	archive := func(i int) []byte { return fmt.Appendf(nil, "layer archive %d", i) }
	layer := func(i int) SetupLayer {
		return SetupLayer{Key: key(i), Digest: archiveDigest(archive(i)), RootfsDigest: "r", Target: "calc",
			Inputs: json.RawMessage(`{"argv":["npm","ci"]}`), Bytes: int64(len(archive(i)))}
	}
	_, err := s.SetupLayer(ctx, key(0))
	wantCode(t, err, protocol.CodeNotFound)
	for i := range 3 {
		b := archive(i)
		if err := s.PutArchive(ctx, archiveDigest(b), bytes.NewReader(b), 100); err != nil {
			t.Fatal(err)
		}
		gone, err := s.RecordSetupLayer(ctx, layer(i), 2)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 && len(gone) != 0 {
			t.Fatalf("layer %d evicted %+v", i, gone)
		}
		if i == 1 {
			// Layer 0 used after layer 1 was made: layer 1 is the least recent.
			if l, err := s.SetupLayer(ctx, key(0)); err != nil || l.Digest != layer(0).Digest || l.Target != "calc" {
				t.Fatalf("layer 0: %+v %v", l, err)
			}
		}
		if i == 2 && (len(gone) != 1 || gone[0].Key != key(1) || gone[0].Digest != layer(1).Digest) {
			t.Fatalf("the third layer evicted %+v, want layer 1", gone)
		}
	}
	_, err = s.SetupLayer(ctx, key(1))
	wantCode(t, err, protocol.CodeNotFound)

	// The same key made again: the old archive is handed back.
	again := layer(0)
	again.Digest, again.Bytes = layer(3).Digest, 1
	gone, err := s.RecordSetupLayer(ctx, again, 2)
	if err != nil || len(gone) != 1 || gone[0].Digest != layer(0).Digest {
		t.Fatalf("re-record: %+v %v", gone, err)
	}

	// Every kernel learns what went from the tombstones: layer 1 evicted,
	// layer 0's first archive replaced, oldest first; since the first, only
	// the second.
	evicted, err := s.EvictedSetupLayers(ctx, time.Time{})
	if err != nil || len(evicted) != 2 || evicted[0].Key != key(1) || evicted[0].Digest != layer(1).Digest ||
		evicted[1].Key != key(0) || evicted[1].Digest != layer(0).Digest {
		t.Fatalf("tombstones %+v %v, want layer 1's, then layer 0's first", evicted, err)
	}
	if later, err := s.EvictedSetupLayers(ctx, evicted[0].At); err != nil || len(later) != 1 || later[0].Digest != layer(0).Digest {
		t.Fatalf("tombstones after the first: %+v %v", later, err)
	}
	// Layer 1 made again, same archive: it is no longer gone; layer 2
	// (least recently used) goes in its place.
	if _, err := s.RecordSetupLayer(ctx, layer(1), 2); err != nil {
		t.Fatal(err)
	}
	evicted, err = s.EvictedSetupLayers(ctx, time.Time{})
	if err != nil || len(evicted) != 2 || evicted[0].Key != key(0) || evicted[1].Key != key(2) {
		t.Fatalf("after layer 1 came back: tombstones %+v %v, want layer 0's first archive and layer 2", evicted, err)
	}
	if _, err := s.RecordSetupLayer(ctx, layer(2), 2); err != nil { // back, for the pruning below
		t.Fatal(err)
	}

	// Pruning (aged past in flight) spares what a row names.
	if _, err := e.admin().Exec(ctx, `UPDATE checkpoint_archives SET created_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneArchives(ctx); err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]bool{0: false, 1: true, 2: true} {
		_, err := s.ReadArchive(ctx, archiveDigest(archive(i)), &bytes.Buffer{})
		if (err == nil) != want {
			t.Errorf("archive of layer %d kept %v, want %v", i, err == nil, want)
		}
	}

	for _, bad := range []SetupLayer{{}, {Key: key(9), Digest: "sha256:x", RootfsDigest: "r", Target: "t", Inputs: json.RawMessage(`{}`)},
		{Key: "KEY", Digest: layer(9).Digest, RootfsDigest: "r", Target: "t", Inputs: json.RawMessage(`{}`)}} {
		_, err := s.RecordSetupLayer(ctx, bad, 2)
		wantCode(t, err, protocol.CodeInvalidField)
	}
	_, err = s.RecordSetupLayer(ctx, layer(9), 0)
	wantCode(t, err, protocol.CodeInvalidField)
}
