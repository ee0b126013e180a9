package api

import (
	"os"
	"testing"

	"github.com/autonomic-kernel/autonomic/store"
)

// TestEpisodeOutcome: an episode that ended by itself shows its outcome
// (read back from the episode_ended reason); one an operator ended, or
// one still active, shows none.
func TestEpisodeOutcome(t *testing.T) {
	e := newEnv(t, Access{KernelUID: uint32(os.Getuid()), OperatorGID: -1})
	ctx := ctxT(t)
	landed := `{"outcome":"landed","ref":"refs/heads/main","commit":"` + digest("c")[7:47] + `","effect":"01a232af-4819-7d56-8aa8-b53c077f2462"}`
	for _, c := range []struct {
		reason string
		end    bool
		want   string
	}{
		{landed, true, "landed"},
		{"operator: done", true, ""},
		{"", false, ""},
	} {
		ep, err := e.store.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"origin_intent":"fix"}`), PolicyVersion: 1})
		if err != nil {
			t.Fatal(err)
		}
		if c.end {
			if _, err := e.store.EndEpisode(ctx, store.EndEpisode{EpisodeID: ep.ID, Epoch: 1, State: store.EpisodeCompleted, Reason: c.reason}); err != nil {
				t.Fatal(err)
			}
		}
		v, err := e.client.Episode(ctx, ep.ID.String())
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.want == "" && v.Outcome != nil:
			t.Errorf("%q: outcome %+v, want none", c.reason, v.Outcome)
		case c.want != "" && (v.Outcome == nil || string(v.Outcome.Kind) != c.want || v.Outcome.Ref != "refs/heads/main"):
			t.Errorf("%q: outcome %+v, want %s", c.reason, v.Outcome, c.want)
		}
	}
}
