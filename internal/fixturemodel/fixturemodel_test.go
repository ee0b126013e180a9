package fixturemodel

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// dataLines reads an SSE stream's data payloads.
func dataLines(t *testing.T, resp *http.Response) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestFixCalcStreams(t *testing.T) {
	for _, wire := range []string{Responses, Chat, Messages} {
		t.Run(wire, func(t *testing.T) {
			s, err := Start(FixCalc(wire, "/workspace"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			body := `{"model":"m","stream":true,"tools":[{"name":"x"}]}`
			data := dataLines(t, post(t, s.URL+Routes[wire]+"?beta=true", body))
			all := strings.Join(data, "\n")
			switch wire {
			case Responses:
				if !strings.Contains(all, `"custom_tool_call"`) || !strings.Contains(all, `"apply_patch"`) || !strings.Contains(data[len(data)-1], `"response.completed"`) || !strings.Contains(all, `"input_tokens":1200`) {
					t.Fatalf("responses stream: %s", all)
				}
			case Chat:
				if data[len(data)-1] != "[DONE]" || !strings.Contains(all, `"finish_reason":"tool_calls"`) || !strings.Contains(all, `"prompt_tokens":1200`) || !strings.Contains(all, `"read"`) {
					t.Fatalf("chat stream: %s", all)
				}
			case Messages:
				if !strings.Contains(all, `"input_json_delta"`) || !strings.Contains(all, `"tool_use"`) || !strings.Contains(all, `"Read"`) || !strings.Contains(data[len(data)-1], "message_stop") {
					t.Fatalf("messages stream: %s", all)
				}
			}
			for _, d := range data {
				if d != "[DONE]" && !json.Valid([]byte(d)) {
					t.Fatalf("not JSON: %s", d)
				}
			}
			// The next turn, not streamed, is one JSON document.
			resp := post(t, s.URL+Routes[wire], `{"model":"m","tools":[{}]}`)
			var doc map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || doc["usage"] == nil {
				t.Fatalf("document: %v %v", doc, err)
			}
			reqs := s.Requests()
			if len(reqs) != 2 || reqs[0].RawQuery != "beta=true" || reqs[0].Header.Get("Authorization") != "Bearer sk-test" || !reqs[0].Stream || reqs[0].Model != "m" {
				t.Fatalf("recorded %+v", reqs)
			}
		})
	}
}

func TestToolLessRequestKeepsTheScript(t *testing.T) {
	s, err := Start(FixCalc(Chat, "/w"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	title := dataLines(t, post(t, s.URL+Routes[Chat], `{"model":"m","stream":true}`))
	if !strings.Contains(title[0], "Fix calc.sh") {
		t.Fatalf("title answer %v", title)
	}
	first := dataLines(t, post(t, s.URL+Routes[Chat], `{"model":"m","stream":true,"tools":[{}]}`))
	if !strings.Contains(first[0], `"read"`) {
		t.Fatalf("the title request consumed a turn: %v", first)
	}
}

// TestPerConversationTurns: two conversations interleaved on one server
// each get their own next turn, read from the tool results they carry.
func TestPerConversationTurns(t *testing.T) {
	for _, c := range []struct{ wire, first, second, turn0, turn1 string }{
		{Responses, `{"model":"m","input":[{"type":"message","role":"user"}]}`,
			`{"model":"m","input":[{"type":"message"},{"type":"custom_tool_call"},{"type":"custom_tool_call_output"}]}`,
			`"name":"apply_patch"`, fixedText},
		{Messages, `{"model":"m","messages":[{"role":"user","content":"fix it"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"fix it"},{"role":"user","content":[{"type":"tool_result"}]}]}`,
			`"name":"Read"`, `"name":"Edit"`},
		{Chat, `{"model":"m","tools":[{}],"messages":[{"role":"user","content":"fix it"}]}`,
			`{"model":"m","tools":[{}],"messages":[{"role":"user","content":"fix it"},{"role":"tool","content":"ok"}]}`,
			`"name":"read"`, `"name":"edit"`},
	} {
		t.Run(c.wire, func(t *testing.T) {
			script := FixCalc(c.wire, "/w")
			script.PerConversation = true
			s, err := Start(script)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// A, B, A's second, B again from the start: the order of
			// arrival takes nothing from either.
			for i, step := range []struct{ body, want string }{{c.first, c.turn0}, {c.first, c.turn0}, {c.second, c.turn1}, {c.first, c.turn0}} {
				resp := post(t, s.URL+Routes[c.wire], step.body)
				var doc map[string]any
				if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
					t.Fatal(err)
				}
				b, _ := json.Marshal(doc)
				if !strings.Contains(string(b), step.want) {
					t.Fatalf("request %d answered %s, want %s in it", i, b, step.want)
				}
			}
		})
	}
}

// FuzzToolResults: any request body counts to a non-negative number of
// tool results, never a panic.
func FuzzToolResults(f *testing.F) {
	f.Add(`{"input":[{"type":"function_call_output"}]}`)
	f.Add(`{"messages":[{"role":"tool"},{"role":"user","content":[{"type":"tool_result"}]}]}`)
	f.Add(`{"input":"text","messages":[{"content":"x"}]}`)
	f.Add(`not json`)
	f.Fuzz(func(t *testing.T, body string) {
		for _, wire := range []string{Responses, Messages, Chat} {
			if n := toolResults(wire, []byte(body)); n < 0 {
				t.Fatalf("%s: %d tool results", wire, n)
			}
		}
	})
}
