package episode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
)

// TestMaxRiskDecidesOnTheProductionPath: the same verified class 3 fix —
// which the rule bank reads as medium risk (0.5: an authoritative class)
// — lands under a signed policy whose semantic.max_risk is 0.5 and is
// denied by the semantic evaluation under one whose max_risk is 0.45.
// Nothing but the signed number differs: the controller must carry the
// policy's max_risk to the governor, and the slow loop must weigh the
// bank against it (issue 28).
func TestMaxRiskDecidesOnTheProductionPath(t *testing.T) {
	for _, c := range []struct {
		maxRisk float64
		want    episode.OutcomeKind
	}{{0.5, episode.OutcomeLanded}, {0.45, episode.OutcomeDenied}} {
		t.Run(fmt.Sprint(c.maxRisk), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			r := harvestRig(t, ctx, "max_risk_"+strings.TrimPrefix(fmt.Sprint(c.maxRisk), "0."), withVerification("make", "test"))
			spec := r.harvestSpec(`sed -i 's/ + 1))/))/' src/calc.sh`)
			signed, err := policy.Sign(policyKey(), policyKeyID, policy.Document{Schema: policy.Schema, ID: "fixture", Version: 1,
				Capability: spec.Envelope, Semantic: policy.Semantic{MaxRisk: c.maxRisk}})
			if err != nil {
				t.Fatal(err)
			}
			spec.Policy = signed
			e, err := r.k.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			o := r.ended(t, ctx, e, c.want)
			if c.want == episode.OutcomeDenied {
				if o.Code != "forbidden" || o.Effect == "" {
					t.Fatalf("denied %+v: want the proposed effect refused", o)
				}
				// The semantic decision names max_risk as what decided: it
				// narrowed the lease below the commit's class.
				eff, err := r.st.Effect(ctx, uuid.MustParse(o.Effect))
				if err != nil {
					t.Fatal(err)
				}
				ds, err := r.st.Decisions(ctx, eff.ID)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, d := range ds {
					var b struct {
						Decider string `json:"decider"`
						Ceiling int    `json:"ceiling"`
					}
					if d.Kind == "semantic" && json.Unmarshal(d.Body, &b) == nil && b.Decider == "max_risk" && b.Ceiling < 3 {
						found = true
					}
				}
				if !found {
					for _, d := range ds {
						t.Logf("decision %s %s: %s", d.Kind, d.Verdict, d.Body)
					}
					t.Fatal("no semantic decision decided by max_risk")
				}
				if head := testbed.Git(t, r.repo, "rev-parse", "refs/heads/main"); head != r.base {
					t.Fatal("main moved")
				}
			}
		})
	}
}
