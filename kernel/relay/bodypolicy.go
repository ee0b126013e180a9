package relay

import (
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// The body policy: what a call may ask the provider to do beyond
// answering from the text it was sent. A provider-side fetch is a way out
// of the domain under the kernel's key — a hosted tool searching or
// fetching the web or calling an MCP server the worker names, an image or
// file read from a URL or from the provider's own store, state kept on
// the provider between calls — so each is refused unless the episode's
// signed policy lifts its rule by name (policy.InferenceLifts). n > 1
// multiplies the output the budget reserved for, and is refused outright.

// serverToolPrefixes are the tool types the provider runs itself (OpenAI
// Responses and Anthropic Messages); a client tool (function, custom,
// local_shell, an Anthropic tool without a type, bash or text_editor) is
// run by the agent, inside the domain.
var serverToolPrefixes = []string{"web_search", "web_fetch", "file_search", "code_interpreter", "code_execution", "mcp",
	"image_generation", "retrieval", "google_search", "url_context"}

// betaFetches are beta features that turn provider-side fetches on.
var betaFetches = []string{"mcp-client", "web-fetch", "web-search", "files-api", "code-execution", "url-context"}

// bodyPolicy checks an admitted body against the policy's lifts.
func bodyPolicy(body []byte, header http.Header, in *policy.Inference) error {
	bad := func(reason string) error { return refuse(protocol.CodeForbidden, http.StatusForbidden, reason) }
	doc := gjson.ParseBytes(body)
	if n := doc.Get("n"); n.Exists() && n.Type != gjson.Null && (n.Type != gjson.Number || n.Raw != "1") {
		return bad("n other than 1 is refused: the budget reserves one answer")
	}
	if !in.Lifted("stored_state") {
		for _, k := range []string{"previous_response_id", "conversation", "background"} {
			if v := doc.Get(k); v.Exists() && v.Type != gjson.Null && v.Type != gjson.False {
				return bad(k + " keeps state on the provider (the policy lifts no stored_state)")
			}
		}
	}
	if !in.Lifted("hosted_tools") {
		if v := doc.Get("mcp_servers"); v.Exists() && v.Type != gjson.Null {
			return bad("mcp_servers has the provider call MCP servers (the policy lifts no hosted_tools)")
		}
		for _, t := range doc.Get("tools").Array() {
			typ := t.Get("type").String()
			for _, p := range serverToolPrefixes {
				if strings.HasPrefix(typ, p) {
					return bad("tool type " + printable(typ) + " runs on the provider (the policy lifts no hosted_tools)")
				}
			}
		}
		for _, h := range header.Values("Anthropic-Beta") {
			for _, f := range strings.Split(h, ",") {
				f = strings.ToLower(strings.TrimSpace(f))
				for _, b := range betaFetches {
					if strings.HasPrefix(f, b) {
						return bad("beta " + printable(f) + " turns on provider-side fetches (the policy lifts no hosted_tools)")
					}
				}
			}
		}
	}
	if !in.Lifted("url_inputs") {
		for _, k := range []string{"messages", "input", "system"} {
			if why := urlInput(doc.Get(k), 0); why != "" {
				return bad(why + " (the policy lifts no url_inputs)")
			}
		}
	}
	return nil
}

// urlInput walks a conversation for a content part the provider would
// fetch or read from its store: an image or file by URL (a data: URL is
// inline, and passes), by file id, or an Anthropic source of type url or
// file. Inline and base64 content pass.
func urlInput(v gjson.Result, depth int) string {
	if depth > maxDepth {
		return ""
	}
	switch {
	case v.IsArray():
		for _, e := range v.Array() {
			if why := urlInput(e, depth+1); why != "" {
				return why
			}
		}
	case v.IsObject():
		if why := contentPart(v); why != "" {
			return why
		}
		var why string
		v.ForEach(func(_, e gjson.Result) bool {
			if e.IsArray() || e.IsObject() {
				why = urlInput(e, depth+1)
			}
			return why == ""
		})
		return why
	}
	return ""
}

func contentPart(v gjson.Result) string {
	switch v.Get("type").String() {
	case "image_url": // chat completions: {"image_url": {"url": ...}}
		if !inline(v.Get("image_url.url").String()) {
			return "an image by URL"
		}
	case "input_image": // responses: "image_url" a string, or "file_id"
		if v.Get("file_id").Exists() || !inline(v.Get("image_url").String()) {
			return "an image by URL or file id"
		}
	case "input_file", "file": // responses and chat files
		for _, k := range []string{"file_id", "file_url", "file.file_id"} {
			if v.Get(k).Exists() {
				return "a file by URL or file id"
			}
		}
	case "image", "document": // messages: {"source": {"type": ...}}
		if s := v.Get("source.type").String(); s != "base64" && s != "text" && s != "content" {
			return "a " + v.Get("type").String() + " source of type " + printable(s)
		}
	}
	return ""
}

// inline: a data: URL, which carries its bytes.
func inline(u string) bool { return strings.HasPrefix(strings.ToLower(strings.TrimSpace(u)), "data:") }

// printable bounds a name the body chose before a refusal quotes it.
func printable(s string) string {
	if len(s) > 48 {
		s = s[:48]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
