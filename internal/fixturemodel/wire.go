package fixturemodel

import (
	"encoding/json"
	"fmt"
	"time"
)

// answer renders one turn in one wire API's shape.
type answer struct {
	wire  string
	model string
	n     int // the request's number, for ids
	turn  Turn
}

type event struct {
	name string // SSE "event:" line; empty for Chat Completions
	data string
}

func ev(name string, v any) event {
	b, _ := json.Marshal(v)
	return event{name: name, data: string(b)}
}

func (a answer) id(prefix string, i int) string { return fmt.Sprintf("%s_%d_%d", prefix, a.n, i) }

func (a answer) events() []event {
	switch a.wire {
	case Responses:
		return a.responsesEvents()
	case Chat:
		return a.chatEvents()
	default:
		return a.messagesEvents()
	}
}

func (a answer) document() any {
	switch a.wire {
	case Responses:
		return a.responsesObject("completed")
	case Chat:
		return a.chatObject()
	default:
		return a.messagesObject()
	}
}

// --- Responses (Codex) ---

func (a answer) responsesItems() []any {
	var items []any
	for i, c := range a.turn.Tools {
		if c.Custom {
			items = append(items, map[string]any{"type": "custom_tool_call", "id": a.id("ctc", i), "call_id": a.id("call", i),
				"name": c.Name, "input": c.CustomInput, "status": "completed"})
		} else {
			items = append(items, map[string]any{"type": "function_call", "id": a.id("fc", i), "call_id": a.id("call", i),
				"name": c.Name, "arguments": c.arguments(), "status": "completed"})
		}
	}
	if len(a.turn.Tools) == 0 {
		items = append(items, map[string]any{"type": "message", "id": a.id("msg", 0), "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": a.turn.Text, "annotations": []any{}}}})
	}
	return items
}

func (a answer) responsesObject(status string) map[string]any {
	o := map[string]any{"id": a.id("resp", 0), "object": "response", "created_at": time.Now().Unix(), "status": status,
		"model": a.model, "output": []any{}}
	if status == "completed" {
		o["output"] = a.responsesItems()
		if !a.turn.NoUsage {
			u := a.turn.Usage
			o["usage"] = map[string]any{"input_tokens": u.Input, "input_tokens_details": map[string]any{"cached_tokens": 0},
				"output_tokens": u.Output, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": u.Input + u.Output}
		}
	}
	return o
}

func (a answer) responsesEvents() []event {
	out := []event{ev("response.created", map[string]any{"type": "response.created", "response": a.responsesObject("in_progress")})}
	for i, item := range a.responsesItems() {
		out = append(out, ev("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": i, "item": item}))
	}
	return append(out, ev("response.completed", map[string]any{"type": "response.completed", "response": a.responsesObject("completed")}))
}

// --- Chat Completions (opencode) ---

func (a answer) chatUsage() any {
	if a.turn.NoUsage {
		return nil
	}
	u := a.turn.Usage
	return map[string]any{"prompt_tokens": u.Input, "completion_tokens": u.Output, "total_tokens": u.Input + u.Output}
}

func (a answer) chatToolCalls(stream bool) []any {
	var calls []any
	for i, c := range a.turn.Tools {
		call := map[string]any{"id": a.id("call", i), "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.arguments()}}
		if stream {
			call["index"] = i
		}
		calls = append(calls, call)
	}
	return calls
}

func (a answer) chatFinish() string {
	if len(a.turn.Tools) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func (a answer) chatChunk(delta map[string]any, finish any, usage any) event {
	c := map[string]any{"id": a.id("chatcmpl", 0), "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": a.model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	if usage != nil {
		c["usage"] = usage
	}
	return ev("", c)
}

func (a answer) chatEvents() []event {
	var first map[string]any
	if len(a.turn.Tools) > 0 {
		first = map[string]any{"role": "assistant", "tool_calls": a.chatToolCalls(true)}
	} else {
		first = map[string]any{"role": "assistant", "content": a.turn.Text}
	}
	return []event{
		a.chatChunk(first, nil, nil),
		a.chatChunk(map[string]any{}, a.chatFinish(), a.chatUsage()),
		{data: "[DONE]"},
	}
}

func (a answer) chatObject() any {
	msg := map[string]any{"role": "assistant", "content": nil}
	if len(a.turn.Tools) > 0 {
		msg["tool_calls"] = a.chatToolCalls(false)
	} else {
		msg["content"] = a.turn.Text
	}
	o := map[string]any{"id": a.id("chatcmpl", 0), "object": "chat.completion", "created": time.Now().Unix(), "model": a.model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": a.chatFinish()}}}
	if u := a.chatUsage(); u != nil {
		o["usage"] = u
	}
	return o
}

// --- Messages (Claude Code) ---

func (a answer) stopReason() string {
	if len(a.turn.Tools) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

func (a answer) messagesEvents() []event {
	start := map[string]any{"id": a.id("msg", 0), "type": "message", "role": "assistant", "model": a.model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil}
	if !a.turn.NoUsage {
		start["usage"] = map[string]any{"input_tokens": a.turn.Usage.Input, "output_tokens": 1}
	}
	out := []event{ev("message_start", map[string]any{"type": "message_start", "message": start})}
	block := func(i int, cb map[string]any, deltas []map[string]any) {
		out = append(out, ev("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": cb}))
		for _, d := range deltas {
			out = append(out, ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}))
		}
		out = append(out, ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}))
	}
	for i, c := range a.turn.Tools {
		args := c.arguments()
		half := len(args) / 2 // the input arrives in pieces, as it does from the API
		block(i, map[string]any{"type": "tool_use", "id": a.id("toolu", i), "name": c.Name, "input": map[string]any{}},
			[]map[string]any{{"type": "input_json_delta", "partial_json": args[:half]}, {"type": "input_json_delta", "partial_json": args[half:]}})
	}
	if len(a.turn.Tools) == 0 {
		block(0, map[string]any{"type": "text", "text": ""}, []map[string]any{{"type": "text_delta", "text": a.turn.Text}})
	}
	delta := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": a.stopReason(), "stop_sequence": nil}}
	if !a.turn.NoUsage {
		delta["usage"] = map[string]any{"output_tokens": a.turn.Usage.Output}
	}
	return append(out, ev("message_delta", delta), ev("message_stop", map[string]any{"type": "message_stop"}))
}

func (a answer) messagesObject() any {
	var content []any
	for i, c := range a.turn.Tools {
		content = append(content, map[string]any{"type": "tool_use", "id": a.id("toolu", i), "name": c.Name, "input": c.Input})
	}
	if len(a.turn.Tools) == 0 {
		content = append(content, map[string]any{"type": "text", "text": a.turn.Text})
	}
	o := map[string]any{"id": a.id("msg", 0), "type": "message", "role": "assistant", "model": a.model, "content": content,
		"stop_reason": a.stopReason(), "stop_sequence": nil}
	if !a.turn.NoUsage {
		o["usage"] = map[string]any{"input_tokens": a.turn.Usage.Input, "output_tokens": a.turn.Usage.Output}
	}
	return o
}
