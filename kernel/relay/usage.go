package relay

import (
	"bytes"
	"encoding/json"

	"github.com/autonomic-kernel/autonomic/kernel/config"
)

// usage is what a provider reported, as tokens.
type usage struct {
	reported bool
	input    int64 // including cache reads and writes
	output   int64
	// seenInput is the input a stream reported before it was cut (a
	// Messages message_start with no message_delta after it): not a
	// settlement, but a floor the charge may not go under.
	seenInput int64
}

// maxLine bounds one SSE line (or a whole JSON answer) the tracker keeps to
// read usage from; a longer one passes through unread, and the call stays
// charged its whole reservation.
const maxLine = 4 << 20

// maxCount bounds one reported token count (2^40, far beyond any model).
const maxCount = 1 << 40

// tracker reads usage from a response as it passes, without holding it:
// for SSE only the current line, for a JSON answer the document up to
// maxLine.
type tracker struct {
	wire  string
	sse   bool
	line  []byte
	over  bool // the current line (or document) passed maxLine
	usage usage
	// partial: a Messages stream reported its input in message_start but
	// no message_delta has closed it; a stream cut there reports nothing.
	partial bool
}

func (t *tracker) write(p []byte) {
	if !t.sse {
		t.keep(p)
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.keep(p)
			return
		}
		t.keep(p[:i])
		if !t.over {
			t.sseLine(bytes.TrimSuffix(t.line, []byte("\r")))
		}
		t.line, t.over = t.line[:0], false
		p = p[i+1:]
	}
}

func (t *tracker) keep(p []byte) {
	if t.over {
		return
	}
	if len(t.line)+len(p) > maxLine {
		t.over, t.line = true, t.line[:0]
		return
	}
	t.line = append(t.line, p...)
}

// finish reads a JSON answer's usage once it is complete.
func (t *tracker) finish() usage {
	if !t.sse && !t.over {
		var doc struct {
			Usage json.RawMessage `json:"usage"`
		}
		if json.Unmarshal(t.line, &doc) == nil {
			t.take(doc.Usage, false)
		}
	}
	if t.partial {
		return usage{seenInput: t.usage.input}
	}
	return t.usage
}

// Markers that an event may carry usage; other events are not parsed.
var (
	markCompleted = []byte(`"response.completed"`)
	markUsage     = []byte(`"usage"`)
)

func (t *tracker) sseLine(line []byte) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || !bytes.Contains(data, markUsage) {
		return
	}
	data = bytes.TrimSpace(data)
	switch t.wire {
	case config.WireResponses:
		// response.completed carries the whole response with its usage.
		if !bytes.Contains(data, markCompleted) {
			return
		}
		var ev struct {
			Type     string `json:"type"`
			Response struct {
				Usage json.RawMessage `json:"usage"`
			} `json:"response"`
		}
		if json.Unmarshal(data, &ev) == nil && ev.Type == "response.completed" {
			t.take(ev.Response.Usage, false)
		}
	case config.WireChat:
		// The final chunk carries usage (with stream_options or by default).
		var ev struct {
			Usage json.RawMessage `json:"usage"`
		}
		if json.Unmarshal(data, &ev) == nil {
			t.take(ev.Usage, false)
		}
	case config.WireMessages:
		// message_start carries input usage, message_delta the cumulative
		// output (and, on newer API versions, input again).
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage json.RawMessage `json:"usage"`
			} `json:"message"`
			Usage json.RawMessage `json:"usage"`
		}
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		switch ev.Type {
		case "message_start":
			t.take(ev.Message.Usage, true)
			t.partial = true
		case "message_delta":
			t.take(ev.Usage, true)
			t.partial = false
		}
	}
}

// take reads one usage object in any of the three shapes. merge keeps the
// larger of what was already seen (Messages reports in pieces).
func (t *tracker) take(raw json.RawMessage, merge bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	var u struct {
		InputTokens              *int64 `json:"input_tokens"`
		OutputTokens             *int64 `json:"output_tokens"`
		PromptTokens             *int64 `json:"prompt_tokens"`
		CompletionTokens         *int64 `json:"completion_tokens"`
		CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	}
	if json.Unmarshal(raw, &u) != nil {
		return
	}
	// Each count is bounded, so no sum of them can overflow (a hostile
	// or broken upstream could report anything).
	val := func(p *int64) int64 {
		if p == nil || *p < 0 {
			return 0
		}
		return min(*p, maxCount)
	}
	in := val(u.InputTokens) + val(u.PromptTokens) + val(u.CacheCreationInputTokens) + val(u.CacheReadInputTokens)
	out := val(u.OutputTokens) + val(u.CompletionTokens)
	if u.InputTokens == nil && u.PromptTokens == nil && u.OutputTokens == nil && u.CompletionTokens == nil {
		return
	}
	if merge {
		in, out = max(in, t.usage.input), max(out, t.usage.output)
	}
	t.usage = usage{reported: true, input: in, output: out}
}
