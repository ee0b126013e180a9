package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/autonomic-kernel/autonomic/kernel/episode"
)

// DescribeEvent is one ledger entry as a person reads it in a timeline: what
// happened, in words, with the few fields that say it (ids shortened);
// an entry this does not know is its body on one line. Every value is
// printed escaped (strconv.QuoteToASCII where it is text a worker or a
// model could have chosen), so no entry can redraw the terminal.
func DescribeEvent(kind string, body json.RawMessage) string {
	b := gjson.ParseBytes(body)
	str := func(path string) string { return b.Get(path).String() }
	short := func(path string) string {
		s := str(path)
		if len(s) > 8 {
			return s[:8]
		}
		return s
	}
	switch kind {
	case "episode_created":
		return "episode created (policy v" + str("policy_version") + ")"
	case "lease_granted":
		return "lease " + short("lease_id") + " granted (epoch " + str("lease_epoch") + ")"
	case "lease_revoked":
		return "lease " + short("lease_id") + " revoked: " + quoted(str("reason"))
	case "domain_created":
		return "domain created (generation " + str("generation") + ")"
	case "inference_budget_set":
		return fmt.Sprintf("inference budget: %s tokens, $%.2f", str("max_tokens"), float64(b.Get("max_spend_micro_usd").Int())/1e6)
	case "inference_budget_charged":
		return fmt.Sprintf("inference budget reserved: %s tokens, $%.2f", str("tokens"), float64(b.Get("spend_micro_usd").Int())/1e6)
	case "inference_budget_released":
		return fmt.Sprintf("inference budget returned: %s tokens, $%.2f", str("tokens"), float64(b.Get("spend_micro_usd").Int())/1e6)
	case "generation_started":
		return "domain generation " + str("generation") + " started"
	case "generation_destroyed":
		return "domain generation " + str("generation") + " destroyed"
	case "checkpoint_recorded":
		s := "checkpoint " + strings.TrimPrefix(str("digest"), "sha256:")[:min(12, len(strings.TrimPrefix(str("digest"), "sha256:")))]
		if b.Get("stable").Exists() && !b.Get("stable").Bool() {
			s += " (the worker's final state, for the harvest)"
		}
		return s
	case "checkpoint_stable":
		return "checkpoint marked stable"
	case "epoch_advanced":
		return "epoch " + str("from") + " → " + str("to") + ": " + quoted(str("reason"))
	case "inference_call":
		return fmt.Sprintf("model call %s → %s, %s in / %s out tokens, %s ms", quoted(str("model")), str("status"),
			str("input_tokens"), str("output_tokens"), str("duration_ms"))
	case "inference_refused":
		return "model call refused (" + str("code") + "): " + quoted(str("method")+" "+str("path"))
	case "inference_budget_exhausted":
		return "inference budget exhausted"
	case "effect_proposed":
		return fmt.Sprintf("effect %s proposed: %s on %s, class %s", short("effect_id"), str("kind"), quoted(str("target_id")), str("class"))
	case "effect_transition":
		s := fmt.Sprintf("effect %s %s → %s", short("effect_id"), str("from"), str("to"))
		if e := b.Get("receipt.error"); e.Exists() {
			s += " (" + e.String() + ")"
		}
		if r := b.Get("reason"); r.Exists() {
			s += ": " + quoted(r.String())
		}
		return s
	case "action_opened":
		// The full id: the operator answers it.
		return fmt.Sprintf("waiting on a human: action %s, %s on %s: %s (autonomic action show %s)", str("action_id"), str("kind"),
			quoted(str("target_id")), quoted(str("reason")), str("action_id"))
	case "action_resolved":
		s := fmt.Sprintf("action %s answered: %s", short("action_id"), str("state"))
		if k := str("key_id"); k != "" {
			s += " (key " + quoted(k) + ")"
		}
		return s
	case "action_dismissed":
		return fmt.Sprintf("action %s dismissed: %s", short("action_id"), str("feedback"))
	case "action_snoozed":
		return fmt.Sprintf("action %s snoozed until %s", short("action_id"), str("until"))
	case "decision_recorded":
		return fmt.Sprintf("decision on effect %s: %s by %s", short("effect_id"), str("verdict"), str("kind"))
	case "episode_ended":
		s := "episode ended " + str("state")
		if o, ok := episode.ParseOutcome(str("reason")); ok {
			s += ": " + string(o.Kind)
			if o.Ref != "" {
				s += " on " + quoted(o.Ref)
			}
			if o.Code != "" {
				s += " (" + o.Code + ")"
			}
		} else if r := str("reason"); r != "" {
			s += ": " + quoted(r)
		}
		return s
	}
	return OneLine(body)
}

// OneLine is a body on one line, cut at 120 bytes (on a rune boundary).
func OneLine(b json.RawMessage) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 120 {
		i := 120
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "…"
	}
	return s
}

// quoted is text for a terminal: printable ASCII as it is, anything else
// escaped.
func quoted(s string) string {
	q := strconv.QuoteToASCII(s)
	if q[1:len(q)-1] == s && !strings.ContainsAny(s, " \"") {
		return s
	}
	return q
}
