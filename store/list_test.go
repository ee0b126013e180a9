package store

import (
	"testing"

	"github.com/google/uuid"
)

func TestListEpisodesAndEffects(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a := e.episode(e.store)
	b := e.episode(e.store)
	eff, err := readyEffect(ctx, e.store, a.ep.ID, 1, a.lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := e.store.ListEpisodes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 || eps[0].ID != b.ep.ID || eps[1].ID != a.ep.ID {
		t.Fatalf("episodes: got %d, want newest first [%s %s]", len(eps), b.ep.ID, a.ep.ID)
	}
	if eps[0].Spec != nil || eps[0].State != EpisodeActive {
		t.Fatalf("list must not carry specs and must read state: %+v", eps[0])
	}
	if one, err := e.store.ListEpisodes(ctx, 1); err != nil || len(one) != 1 {
		t.Fatalf("limit 1: %d %v", len(one), err)
	}
	effs, err := e.store.ListEffects(ctx, a.ep.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(effs) != 1 || effs[0].ID != eff.ID || effs[0].State != Ready {
		t.Fatalf("effects: %+v", effs)
	}
	if none, err := e.store.ListEffects(ctx, uuid.New(), 10); err != nil || len(none) != 0 {
		t.Fatalf("unknown episode: %d %v", len(none), err)
	}
}
