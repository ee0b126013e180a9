package store

import (
	"testing"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestEffectInEpisode: the broker's one-statement ownership read answers
// the effect with its episode's epoch; another episode's effect, an
// unknown effect and an unknown episode are not_found — the first two
// still with the episode's epoch, so a fenced caller hears it is fenced.
func TestEffectInEpisode(t *testing.T) {
	e := newEnv(t)
	s := e.open("k1", 0)
	ctx := ctxT(t)
	a, b := e.episode(s), e.episode(s)
	eff, err := readyEffect(ctx, s, a.ep.ID, 1, a.lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, epoch, err := s.EffectInEpisode(ctx, a.ep.ID, eff.ID)
	if err != nil || got.ID != eff.ID || got.State != Ready || epoch != 1 {
		t.Fatalf("own effect: %+v epoch %d, %v", got.State, epoch, err)
	}
	if _, err := s.AdvanceEpoch(ctx, AdvanceEpoch{EpisodeID: a.ep.ID, FromEpoch: 1, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, epoch, err := s.EffectInEpisode(ctx, a.ep.ID, eff.ID); err != nil || epoch != 2 {
		t.Fatalf("after the advance: epoch %d, %v", epoch, err)
	}
	if _, epoch, err := s.EffectInEpisode(ctx, b.ep.ID, eff.ID); code(err) != protocol.CodeNotFound || epoch != 1 {
		t.Fatalf("another episode's effect: epoch %d, %v", epoch, err)
	}
	if _, epoch, err := s.EffectInEpisode(ctx, a.ep.ID, uuid.New()); code(err) != protocol.CodeNotFound || epoch != 2 {
		t.Fatalf("unknown effect: epoch %d, %v", epoch, err)
	}
	if _, epoch, err := s.EffectInEpisode(ctx, uuid.New(), eff.ID); code(err) != protocol.CodeNotFound || epoch != 0 {
		t.Fatalf("unknown episode: epoch %d, %v", epoch, err)
	}
}

// TestLeaseInEpisode: the prepare fence's one round trip answers the
// episode (without its spec) and the lease; a missing lease is not_found
// with the episode still answered, a missing episode is not_found.
func TestLeaseInEpisode(t *testing.T) {
	e := newEnv(t)
	s := e.open("k1", 0)
	ctx := ctxT(t)
	a := e.episode(s)
	ep, l, err := s.LeaseInEpisode(ctx, a.ep.ID, a.lease.ID)
	if err != nil || ep.ID != a.ep.ID || ep.Epoch != 1 || ep.State != EpisodeActive || ep.Spec != nil || l.ID != a.lease.ID || l.EpisodeID != a.ep.ID {
		t.Fatalf("episode %+v lease %+v: %v", ep, l, err)
	}
	if ep, _, err := s.LeaseInEpisode(ctx, a.ep.ID, uuid.New()); code(err) != protocol.CodeNotFound || ep.ID != a.ep.ID {
		t.Fatalf("unknown lease: episode %s, %v", ep.ID, err)
	}
	if ep, _, err := s.LeaseInEpisode(ctx, uuid.New(), a.lease.ID); code(err) != protocol.CodeNotFound || ep.ID != uuid.Nil {
		t.Fatalf("unknown episode: episode %s, %v", ep.ID, err)
	}
}
