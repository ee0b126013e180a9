package api

import (
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestSettleOverTheSocket: `autonomic effect settle` reaches the broker
// through the API: an outcome other than committed or not_committed, or a
// reason that is empty, too long or not text, is invalid_field and changes
// nothing; an effect that is not commit_unknown is illegal_transition (the
// operator's word is only for what nothing else can decide).
func TestSettleOverTheSocket(t *testing.T) {
	a := newApprovalEnv(t)
	e := a.awaiting(t, "releases", "v1.tar")
	before := a.snapshot(t, e.ID)
	ctx := ctxT(t)
	for _, c := range []struct {
		body SettleRequest
		code protocol.Code
	}{
		{SettleRequest{Outcome: "maybe", Reason: "x"}, protocol.CodeInvalidField},
		{SettleRequest{Outcome: "committed"}, protocol.CodeInvalidField},
		{SettleRequest{Outcome: "committed", Reason: "line\x1b[2J"}, protocol.CodeInvalidField},
		{SettleRequest{Outcome: "committed", Reason: string(make([]byte, 201))}, protocol.CodeInvalidField},
		{SettleRequest{Outcome: "not_committed", Reason: "checked"}, protocol.CodeIllegalTransition},
	} {
		var out EffectView
		err := a.client.do(ctx, "POST", "/v1/effects/"+e.ID.String()+"/settle", nil, c.body, &out)
		wantCode(t, err, c.code)
	}
	if _, err := a.client.Settle(ctx, e.ID.String(), true, "checked"); protocol.AsWire(err).Code != protocol.CodeIllegalTransition {
		t.Errorf("client settle of an evaluating effect: %v", err)
	}
	if a.snapshot(t, e.ID) != before {
		t.Error("a refused settle changed the effect or the ledger")
	}
}
