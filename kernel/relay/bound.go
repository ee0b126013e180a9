package relay

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// capField is the output cap each wire API reads.
var capField = map[string]string{
	config.WireResponses: "max_output_tokens",
	config.WireChat:      "max_completion_tokens",
	config.WireMessages:  "max_tokens",
}

// boundBody returns the body the provider is sent: the worker's own, with
// the output cap the call was reserved for inserted where it named none,
// and, for a streamed chat completion, stream_options.include_usage (a
// chat stream reports its usage only when asked). The body is one JSON
// object with no repeated key (admit), so a member the body lacks can be
// added at the front without changing what any other member says.
func boundBody(body []byte, wire string, c call, outCap int64) ([]byte, error) {
	var add []string
	if c.maxOutput == 0 {
		add = append(add, strconv.Quote(capField[wire])+":"+strconv.FormatInt(outCap, 10))
	}
	if wire == config.WireChat && c.stream {
		so := gjson.GetBytes(body, "stream_options")
		switch iu := so.Get("include_usage"); {
		case !so.Exists() || so.Type == gjson.Null:
			add = append(add, `"stream_options":{"include_usage":true}`)
		case iu.Type != gjson.True:
			return nil, &Refusal{Code: protocol.CodeInvalidField, Status: http.StatusBadRequest,
				Reason: "a streamed chat completion must ask for its usage (stream_options.include_usage)", Model: c.model}
		}
	}
	if len(add) == 0 {
		return body, nil
	}
	rest := bytes.TrimLeft(body, " \t\r\n")[1:] // after "{"
	out := make([]byte, 0, len(body)+64)
	out = append(out, '{')
	for i, a := range add {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, a...)
	}
	if t := bytes.TrimLeft(rest, " \t\r\n"); len(t) > 0 && t[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...), nil
}

// upstreamError is the body the worker gets for an upstream error: the
// provider's error type and code when they are short tokens (what agents
// branch on: rate_limit_error, overloaded_error, context_length_exceeded),
// never its message.
func upstreamError(resp *http.Response) []byte {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	doc := gjson.ParseBytes(raw)
	token := func(paths ...string) string {
		for _, p := range paths {
			if v := doc.Get(p); v.Type == gjson.String && tokenRE.MatchString(v.Str) {
				return v.Str
			}
		}
		return ""
	}
	typ := cmp.Or(token("error.type", "type"), "upstream_error")
	if typ == "error" {
		typ = "upstream_error"
	}
	b, _ := json.Marshal(errorBody{Type: "error", Error: errorInfo{Type: typ, Code: cmp.Or(token("error.code"), typ),
		Message:   fmt.Sprintf("autonomic relay: the provider answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode)),
		Retryable: resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500}})
	return b
}

// tokenRE is the shape of an error type or code a provider names.
var tokenRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)
