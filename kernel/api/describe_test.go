package api

import (
	"strings"
	"testing"
)

// TestTimelineReadsAsWords: the main job's timeline says what happened in
// words, with the fields that matter, and text a worker or model chose is
// escaped so it cannot redraw the terminal.
func TestTimelineReadsAsWords(t *testing.T) {
	for _, c := range []struct {
		kind, body, want string
	}{
		{"inference_call", `{"model":"gpt-5","status":200,"input_tokens":812,"output_tokens":95,"duration_ms":1400}`, "model call gpt-5 → 200, 812 in / 95 out tokens, 1400 ms"},
		{"effect_proposed", `{"effect_id":"01a2b3c4-aaaa","kind":"git_commit","target_id":"calc","class":3}`, "effect 01a2b3c4 proposed: git_commit on calc, class 3"},
		{"effect_transition", `{"effect_id":"01a2b3c4-aaaa","from":"committing","to":"failed","receipt":{"error":"ref_moved"}}`, "effect 01a2b3c4 committing → failed (ref_moved)"},
		{"episode_ended", `{"state":"completed","reason":"{\"outcome\":\"landed\",\"ref\":\"refs/heads/agent/codex/1\"}"}`, "episode ended completed: landed on refs/heads/agent/codex/1"},
		{"episode_ended", `{"state":"aborted","reason":"operator uid 0: \u001b]0;pwned\u0007"}`, `episode ended aborted: "operator uid 0: \x1b]0;pwned\a"`},
		{"inference_budget_set", `{"max_tokens":4000000,"max_spend_micro_usd":20000000}`, "inference budget: 4000000 tokens, $20.00"},
		{"action_opened", `{"action_id":"01a2b3c4-bbbb","kind":"git_commit","target_id":"calc","reason":"outside the lease: no grant of git_commit on calc at class 3"}`,
			`waiting on a human: action 01a2b3c4-bbbb, git_commit on calc: "outside the lease: no grant of git_commit on calc at class 3" (autonomic action show 01a2b3c4-bbbb)`},
		{"action_resolved", `{"action_id":"01a2b3c4-bbbb","state":"approved","key_id":"ops-1"}`, "action 01a2b3c4 answered: approved (key ops-1)"},
		{"unknown_kind", `{"a": 1}`, `{"a": 1}`},
	} {
		got := DescribeEvent(c.kind, []byte(c.body))
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.kind, got, c.want)
		}
		if strings.ContainsAny(got, "\x1b\x07") {
			t.Errorf("%s: a control character reaches the terminal: %q", c.kind, got)
		}
	}
}
