package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

func TestInferenceAbsentGrantsNothing(t *testing.T) {
	ops := newSigner(t, "ops")
	keys := Keys{ops.id: ops.pub}
	p, err := Verify(keys, ops.sign(t, exampleDoc()))
	if err != nil {
		t.Fatal(err)
	}
	if p.Inference != nil || p.Inference.Allows("gpt-5.5") {
		t.Fatalf("a policy without inference grants %+v", p.Inference)
	}
	// The section is omitted from the signed form when absent: a policy
	// signed before it existed keeps its canonical bytes and digest.
	if strings.Contains(string(ops.sign(t, exampleDoc())), "inference") {
		t.Fatal("absent inference appears in the signed document")
	}
}

func TestInferenceAdmitted(t *testing.T) {
	ops := newSigner(t, "ops")
	keys := Keys{ops.id: ops.pub}
	d := exampleDoc()
	d.Inference = &Inference{Models: []string{"gpt-5.5", "qwen/qwen3-coder:free"}, MaxTokens: 2_000_000, MaxSpendMicroUSD: 0}
	p, err := Verify(keys, ops.sign(t, d))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Inference.Allows("gpt-5.5") || p.Inference.Allows("gpt-5") || p.Inference.MaxTokens != 2_000_000 {
		t.Fatalf("inference %+v", p.Inference)
	}
	plain, err := Verify(keys, ops.sign(t, exampleDoc()))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Digest == p.Digest {
		t.Fatal("the inference section is not covered by the digest")
	}
}

func TestInferenceRefused(t *testing.T) {
	ops := newSigner(t, "ops")
	keys := Keys{ops.id: ops.pub}
	const (
		head = `{"schema":"autonomic.policy.v1","id":"p","version":1,"capability":{"max_class":1,"grants":[],"allow":[],"forbid":[],"budget":{"bytes_per_effect":0,"bytes_total":0,"effects_per_minute":0}},"semantic":{"max_risk":0.5},"inference":`
	)
	cases := []struct {
		name, inf string
		code      protocol.Code
	}{
		{"no models", `{"max_tokens":1,"max_spend_micro_usd":0}`, protocol.CodeMissingField},
		{"null models", `{"models":null,"max_tokens":1,"max_spend_micro_usd":0}`, protocol.CodeMissingField},
		{"no max_tokens", `{"models":[],"max_spend_micro_usd":0}`, protocol.CodeMissingField},
		{"no spend", `{"models":[],"max_tokens":1}`, protocol.CodeMissingField},
		{"zero tokens", `{"models":[],"max_tokens":0,"max_spend_micro_usd":0}`, protocol.CodeInvalidField},
		{"negative spend", `{"models":[],"max_tokens":1,"max_spend_micro_usd":-1}`, protocol.CodeInvalidField},
		{"huge tokens", `{"models":[],"max_tokens":9007199254740993,"max_spend_micro_usd":0}`, protocol.CodeInvalidField},
		{"bad model", `{"models":["../x"],"max_tokens":1,"max_spend_micro_usd":0}`, protocol.CodeInvalidField},
		{"model with space", `{"models":["gpt 5"],"max_tokens":1,"max_spend_micro_usd":0}`, protocol.CodeInvalidField},
		{"duplicate model", `{"models":["a","a"],"max_tokens":1,"max_spend_micro_usd":0}`, protocol.CodeInvalidField},
		{"unknown field", `{"models":[],"max_tokens":1,"max_spend_micro_usd":0,"routes":["/x"]}`, protocol.CodeUnknownField},
		{"not an object", `true`, protocol.CodeInvalidField},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Verify(keys, signRaw(t, ops, head+c.inf+`}`))
			if err == nil {
				t.Fatalf("admitted %+v", p.Inference)
			}
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("error %v is not a refusal", err)
			}
			if got := protocol.AsWire(err).Code; got != c.code {
				t.Fatalf("wire code %s, want %s (%v)", got, c.code, err)
			}
		})
	}
}
