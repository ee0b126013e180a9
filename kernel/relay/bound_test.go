package relay

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/autonomic-kernel/autonomic/kernel/config"
)

// TestRelayBudgetIsAnUpperBound: no call can cost more than it was charged
// for. n > 1 is refused (the reservation is for one answer); a request
// without an output cap is sent with the cap it was reserved for, and a
// streamed chat completion with include_usage, so the provider can
// neither outgrow the reservation nor stay silent about its usage; a
// Messages stream cut after message_start reported 500,000 input tokens is
// charged those and the whole output cap, not the reservation made from
// the body's bytes.
func TestRelayBudgetIsAnUpperBound(t *testing.T) {
	t.Run("chat n:64 without include_usage", func(t *testing.T) {
		e := newEnv(t, setup{wire: config.WireChat})
		resp, body := e.raw("POST", "/v1/chat/completions", "application/json", `{"model":"gpt-5.5","n":64,"stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != http.StatusForbidden || e.fixture.Calls() != 0 {
			t.Fatalf("%d %s, %d calls forwarded", resp.StatusCode, body, e.fixture.Calls())
		}
	})
	t.Run("cap and usage inserted", func(t *testing.T) {
		e := newEnv(t, setup{wire: config.WireChat})
		resp, body := e.raw("POST", "/v1/chat/completions", "application/json", ` { "model":"gpt-5.5","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		reqs := e.fixture.Requests()
		if len(reqs) != 1 {
			t.Fatalf("%d requests", len(reqs))
		}
		sent := gjson.ParseBytes(reqs[0].Body)
		if sent.Get("max_completion_tokens").Int() != 1000 || !sent.Get("stream_options.include_usage").Bool() || sent.Get("model").String() != "gpt-5.5" {
			t.Fatalf("forwarded %s", reqs[0].Body)
		}
		// A request that asks for no usage report is refused, not
		// silently changed.
		resp, body = e.raw("POST", "/v1/chat/completions", "application/json", `{"model":"gpt-5.5","stream":true,"stream_options":{"include_usage":false},"messages":[]}`)
		if resp.StatusCode != http.StatusBadRequest || errCode(t, body) != "invalid_field" {
			t.Fatalf("include_usage false: %d %s", resp.StatusCode, body)
		}
		for wire, field := range capField {
			e := newEnv(t, setup{wire: wire})
			resp, body := e.raw("POST", config.InferenceRoutes[wire], "application/json", `{"model":"gpt-5.5","input":"x","messages":[]}`, "Anthropic-Version: 2023-06-01")
			reqs := e.fixture.Requests()
			if resp.StatusCode == http.StatusForbidden || len(reqs) != 1 || gjson.GetBytes(reqs[0].Body, field).Int() != 1000 {
				t.Errorf("%s: %d %s, forwarded %d", wire, resp.StatusCode, body, len(reqs))
			}
		}
	})
	t.Run("messages stream cut after message_start", func(t *testing.T) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":500000,\"output_tokens\":1}}}\n\n"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // cut: no message_delta, no usage
		}))
		defer up.Close()
		e := newEnv(t, setup{wire: config.WireMessages, upstream: up.URL})
		e.raw("POST", "/v1/messages", "application/json", `{"model":"claude-x","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "Anthropic-Version: 2023-06-01")
		if used := e.used(); used < 500000+1000 {
			t.Fatalf("charged %d tokens for a stream that reported 500,000 input tokens and an output cap of 1,000", used)
		}
	})
}
