package relay

import (
	"net/http"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
)

// TestRelayRefusesProviderSideFetches: through a real relay on its
// socket, each way of making the provider fetch or keep something under
// the kernel's key — hosted tools (web search and fetch, code execution,
// file search, MCP servers), images and files by URL or file id, URL and
// file document sources, state kept between calls, beta headers that turn
// fetches on — is refused with 403 forbidden before anything is
// forwarded, and recorded; n > 1 is refused too. The same calls pass once
// the signed policy lifts the rule by name, and a plain call passes.
func TestRelayRefusesProviderSideFetches(t *testing.T) {
	type call struct {
		name, wire, lift, body string
		headers                []string
	}
	calls := []call{
		{"responses web_search", config.WireResponses, "hosted_tools", `{"model":"gpt-5.5","input":"hi","tools":[{"type":"web_search"}]}`, nil},
		{"responses web_search_preview", config.WireResponses, "hosted_tools", `{"model":"gpt-5.5","input":"hi","tools":[{"type":"function","name":"f"},{"type":"web_search_preview"}]}`, nil},
		{"responses mcp", config.WireResponses, "hosted_tools", `{"model":"gpt-5.5","input":"hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://evil.example/mcp"}]}`, nil},
		{"responses code_interpreter", config.WireResponses, "hosted_tools", `{"model":"gpt-5.5","input":"hi","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, nil},
		{"responses file_search", config.WireResponses, "hosted_tools", `{"model":"gpt-5.5","input":"hi","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`, nil},
		{"responses image by url", config.WireResponses, "url_inputs", `{"model":"gpt-5.5","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://evil.example/x.png"}]}]}`, nil},
		{"responses image by file id", config.WireResponses, "url_inputs", `{"model":"gpt-5.5","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`, nil},
		{"responses file by url", config.WireResponses, "url_inputs", `{"model":"gpt-5.5","input":[{"role":"user","content":[{"type":"input_file","file_url":"https://evil.example/a.pdf"}]}]}`, nil},
		{"responses previous_response_id", config.WireResponses, "stored_state", `{"model":"gpt-5.5","input":"hi","previous_response_id":"resp_1"}`, nil},
		{"responses conversation", config.WireResponses, "stored_state", `{"model":"gpt-5.5","input":"hi","conversation":"conv_1"}`, nil},
		{"responses background", config.WireResponses, "stored_state", `{"model":"gpt-5.5","input":"hi","background":true}`, nil},
		{"chat image by url", config.WireChat, "url_inputs", `{"model":"gpt-5.5","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://evil.example/x.png"}}]}]}`, nil},
		{"chat file id", config.WireChat, "url_inputs", `{"model":"gpt-5.5","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, nil},
		{"messages web_fetch", config.WireMessages, "hosted_tools", `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}`, nil},
		{"messages web_search", config.WireMessages, "hosted_tools", `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, nil},
		{"messages mcp_servers", config.WireMessages, "hosted_tools", `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"mcp_servers":[{"type":"url","url":"https://evil.example/sse","name":"x"}]}`, nil},
		{"messages beta", config.WireMessages, "hosted_tools", `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, []string{"Anthropic-Beta: interleaved-thinking-2025-05-14, mcp-client-2025-04-04"}},
		{"messages image url source", config.WireMessages, "url_inputs", `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://evil.example/x.png"}}]}]}`, nil},
		{"messages document file source", config.WireMessages, "url_inputs", `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}`, nil},
		{"messages nested in a tool result", config.WireMessages, "url_inputs", `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"https://evil.example/x.png"}}]}]}]}`, nil},
	}
	models := []string{"gpt-5.5", "claude-x", "qwen"}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, setup{wire: c.wire})
			route := config.InferenceRoutes[c.wire]
			hdr := append([]string{"Anthropic-Version: 2023-06-01"}, c.headers...)
			resp, body := e.raw("POST", route, "application/json", c.body, hdr...)
			if resp.StatusCode != http.StatusForbidden || errCode(t, body) != "forbidden" {
				t.Fatalf("%d %s, want 403 forbidden", resp.StatusCode, body)
			}
			if e.fixture.Calls() != 0 {
				t.Fatalf("a refused call reached the provider")
			}
			// Lifted by name in the signed policy: forwarded.
			lifted := newEnv(t, setup{wire: c.wire, budget: &policy.Inference{Models: models, MaxTokens: 1 << 40, MaxSpendMicroUSD: 1 << 40, Lifts: []string{c.lift}}})
			if resp, body := lifted.raw("POST", route, "application/json", c.body, hdr...); resp.StatusCode == http.StatusForbidden || lifted.fixture.Calls() != 1 {
				t.Fatalf("with %s lifted: %d %s, %d calls forwarded", c.lift, resp.StatusCode, body, lifted.fixture.Calls())
			}
		})
	}
	t.Run("n", func(t *testing.T) {
		e := newEnv(t, setup{wire: config.WireChat})
		for _, n := range []string{"64", "2", "0", `"1"`, "1.5"} {
			resp, body := e.raw("POST", "/v1/chat/completions", "application/json", `{"model":"gpt-5.5","n":`+n+`,"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("n=%s: %d %s", n, resp.StatusCode, body)
			}
		}
		if e.fixture.Calls() != 0 {
			t.Fatal("a refused call reached the provider")
		}
	})
	t.Run("plain calls pass", func(t *testing.T) {
		for wire, body := range map[string]string{
			config.WireResponses: `{"model":"gpt-5.5","input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]}],"tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"file_id":{"type":"string"}}}},{"type":"custom","name":"apply_patch"},{"type":"local_shell"}]}`,
			config.WireChat:      `{"model":"gpt-5.5","n":1,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
			config.WireMessages:  `{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}],"tools":[{"name":"Bash","input_schema":{"type":"object"}},{"type":"bash_20250124","name":"bash"}]}`,
		} {
			e := newEnv(t, setup{wire: wire})
			resp, out := e.raw("POST", config.InferenceRoutes[wire], "application/json", body, "Anthropic-Version: 2023-06-01", "Anthropic-Beta: interleaved-thinking-2025-05-14")
			if resp.StatusCode == http.StatusForbidden || e.fixture.Calls() != 1 {
				t.Errorf("%s: %d %s", wire, resp.StatusCode, out)
			}
		}
	})
}
