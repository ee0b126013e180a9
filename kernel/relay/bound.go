package relay

import (
	"bytes"
	"net/http"
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
