package policy

import (
	"errors"
	"fmt"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Inference is what a policy grants an episode's inference relay
// (kernel/relay): the models it may call and the episode's whole budget.
//
// A policy without an inference section grants no inference: the relay
// refuses every call (model_refused). That is the default for every
// policy signed before the section existed, so an old policy can never
// start spending on a provider's account.
type Inference struct {
	// Models lists the model ids the episode may name, exactly; the relay
	// also requires the provider's configuration to list them.
	Models []string `json:"models"`
	// MaxTokens bounds input plus output tokens over the whole episode, as
	// the provider reports them (cache reads and writes count as input).
	MaxTokens int64 `json:"max_tokens"`
	// MaxSpendMicroUSD bounds the spend over the whole episode in
	// millionths of a US dollar, priced by the provider's price table.
	// 0 allows only models priced at zero.
	MaxSpendMicroUSD int64 `json:"max_spend_micro_usd"`
	// Lifts name the relay's body rules this policy lifts (InferenceLifts):
	// each lets the provider do something on the episode's behalf that
	// the relay otherwise refuses. None by default.
	Lifts []string `json:"lifts,omitempty"`
}

// InferenceLifts are the relay rules a policy may lift, by name:
//   - hosted_tools: server-side tools the provider runs (web search and
//     fetch, code execution, file search, hosted MCP servers);
//   - url_inputs: images, files and documents the provider fetches by URL
//     or reads from its own file store by id;
//   - stored_state: state the provider keeps between calls
//     (previous_response_id, conversation, background responses).
var InferenceLifts = []string{"hosted_tools", "url_inputs", "stored_state"}

// Lifted reports whether the policy lifts the named rule.
func (i *Inference) Lifted(name string) bool {
	if i == nil {
		return false
	}
	for _, l := range i.Lifts {
		if l == name {
			return true
		}
	}
	return false
}

// Bounds of an inference section.
const (
	MaxInferenceModels = 64
	maxModelLen        = 128
)

// inferenceWire is the strict shape: every field required.
type inferenceWire struct {
	Models           []string `json:"models"`
	MaxTokens        *int64   `json:"max_tokens"`
	MaxSpendMicroUSD *int64   `json:"max_spend_micro_usd"`
	Lifts            []string `json:"lifts"`
}

func (w *inferenceWire) check() (Inference, error) {
	missing := func(name string) error {
		return refuse(ErrMalformed, protocol.E(protocol.CodeMissingField), errors.New(name))
	}
	invalid := func(format string, args ...any) error {
		return refuse(ErrInvalid, protocol.E(protocol.CodeInvalidField), fmt.Errorf(format, args...))
	}
	switch {
	case w.Models == nil:
		return Inference{}, missing("inference.models")
	case w.MaxTokens == nil:
		return Inference{}, missing("inference.max_tokens")
	case w.MaxSpendMicroUSD == nil:
		return Inference{}, missing("inference.max_spend_micro_usd")
	case *w.MaxTokens < 1 || *w.MaxTokens > maxVersion:
		return Inference{}, invalid("inference.max_tokens outside 1..2^53")
	case *w.MaxSpendMicroUSD < 0 || *w.MaxSpendMicroUSD > maxVersion:
		return Inference{}, invalid("inference.max_spend_micro_usd outside 0..2^53")
	}
	if err := checkNames("inference.models", "models", w.Models, MaxInferenceModels, ValidModel, "a model id"); err != nil {
		return Inference{}, invalid("%w", err)
	}
	if err := checkNames("inference.lifts", "lifts", w.Lifts, len(InferenceLifts), func(s string) bool {
		for _, l := range InferenceLifts {
			if s == l {
				return true
			}
		}
		return false
	}, "a relay rule that can be lifted"); err != nil {
		return Inference{}, invalid("%w", err)
	}
	return Inference{Models: w.Models, MaxTokens: *w.MaxTokens, MaxSpendMicroUSD: *w.MaxSpendMicroUSD, Lifts: w.Lifts}, nil
}

// checkNames checks a list of names a section grants (egress hosts,
// inference models): at most max, each of its one valid spelling, none
// twice. The error names the field and the entry.
func checkNames(field, plural string, names []string, max int, valid func(string) bool, shape string) error {
	if len(names) > max {
		return fmt.Errorf("%s lists more than %d %s", field, max, plural)
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !valid(n) {
			return fmt.Errorf("%s: %q is not %s", field, n, shape)
		}
		if seen[n] {
			return fmt.Errorf("%s: %q is listed twice", field, n)
		}
		seen[n] = true
	}
	return nil
}

// Allows reports whether model is in the policy's list.
func (i *Inference) Allows(model string) bool {
	if i == nil {
		return false
	}
	for _, m := range i.Models {
		if m == model {
			return true
		}
	}
	return false
}

// ValidModel is the shape of a model id: 1..128 bytes of
// [A-Za-z0-9._:/@-], starting alphanumeric ("gpt-5.5",
// "claude-sonnet-4-5-20250929", "qwen/qwen3-coder:free").
func ValidModel(s string) bool {
	if s == "" || len(s) > maxModelLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-' && c != ':' && c != '/' && c != '@') {
			return false
		}
	}
	return true
}
