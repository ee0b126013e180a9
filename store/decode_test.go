package store

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestDecodeVersionVector(t *testing.T) {
	cp := uuid.MustParse("0192f0a0-0000-7000-8000-00000000000c")
	good := VersionVector{EpisodeID: uuid.New(), Epoch: 3, PolicyVersion: 2, SnapshotAncestry: &cp,
		TrajectoryVersion: 9, TrajectoryRegime: "stable", LeaseID: uuid.New(), EffectRevision: 1}
	raw, _ := json.Marshal(good)
	got, err := DecodeVersionVector(raw)
	if err != nil || got.EpisodeID != good.EpisodeID || *got.SnapshotAncestry != cp {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{
		`{}`,
		`[]`,
		string(raw[:len(raw)-1]) + `,"extra":1}`,
		string(raw) + `{}`,
		`{"episode_id":"` + good.EpisodeID.String() + `","episode_id":"` + uuid.NewString() + `"}`,
		`{"episode_id":"` + good.EpisodeID.String() + `","epoch":0,"lease_id":"` + good.LeaseID.String() + `","effect_revision":1}`,
		// A key differing only in case would set the field a second time.
		string(raw[:len(raw)-1]) + `,"Epoch":5}`,
		strings.Replace(string(raw), `"epoch"`, `"EPOCH"`, 1),
	} {
		if _, err := DecodeVersionVector([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// FuzzDecodeVersionVector: the decoder never panics, and whatever it
// accepts survives a re-encode unchanged (no field is silently dropped or
// reinterpreted).
func FuzzDecodeVersionVector(f *testing.F) {
	f.Add([]byte(`{"episode_id":"0192f0a0-0000-7000-8000-000000000001","epoch":1,"policy_version":0,"snapshot_ancestry":null,"trajectory_version":0,"trajectory_regime":"","lease_id":"0192f0a0-0000-7000-8000-000000000002","effect_revision":1}`))
	f.Add([]byte(`{"episode_id":"x"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := DecodeVersionVector(raw)
		if err != nil {
			return
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		w, err := DecodeVersionVector(again)
		if err != nil {
			t.Fatalf("re-encoded vector refused: %v", err)
		}
		if (v.SnapshotAncestry == nil) != (w.SnapshotAncestry == nil) ||
			(v.SnapshotAncestry != nil && *v.SnapshotAncestry != *w.SnapshotAncestry) {
			t.Fatal("ancestry changed")
		}
		v.SnapshotAncestry, w.SnapshotAncestry = nil, nil
		if v != w {
			t.Fatalf("round trip changed the vector: %+v vs %+v", v, w)
		}
	})
}
