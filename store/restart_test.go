package store

import (
	"slices"
	"testing"
)

// TestActiveEpisodesAndGenerations: what a starting kernel reads — the
// active episodes with their specs, and every generation of their domains
// with its state.
func TestActiveEpisodesAndGenerations(t *testing.T) {
	e := newEnv(t)
	s, ctx := e.store, ctxT(t)
	live, ended := e.episode(s), e.episode(s)
	if _, err := s.EndEpisode(ctx, EndEpisode{EpisodeID: ended.ep.ID, Epoch: 1, State: EpisodeAborted, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	eps, err := s.ActiveEpisodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(eps))
	for _, ep := range eps {
		ids = append(ids, ep.ID.String())
		if ep.State != EpisodeActive {
			t.Errorf("listed %s episode", ep.State)
		}
		if ep.ID == live.ep.ID && string(ep.Spec) == "" {
			t.Error("active episode listed without its spec")
		}
	}
	if !slices.Contains(ids, live.ep.ID.String()) || slices.Contains(ids, ended.ep.ID.String()) {
		t.Fatalf("active episodes %v: want %s, not %s", ids, live.ep.ID, ended.ep.ID)
	}

	if gens, err := s.Generations(ctx, live.ep.ID); err != nil || len(gens) != 0 {
		t.Fatalf("generations before any domain: %v, %v", gens, err)
	}
	d, _, err := s.CreateDomain(ctx, NewDomain{EpisodeID: live.ep.ID, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DestroyGeneration(ctx, d.ID, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewGeneration(ctx, NewGeneration{DomainID: d.ID, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	gens, err := s.Generations(ctx, live.ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != 2 || gens[0].Generation != 1 || gens[0].State != GenerationDestroyed || gens[0].DestroyedAt == nil ||
		gens[1].Generation != 2 || gens[1].State != GenerationLive || gens[1].DomainID != d.ID || gens[1].Epoch != 1 {
		t.Fatalf("generations: %+v", gens)
	}
	if gens, err := s.Generations(ctx, ended.ep.ID); err != nil || len(gens) != 0 {
		t.Fatalf("another episode's generations: %v, %v", gens, err)
	}
}
