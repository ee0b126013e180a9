package fixturemodel

import (
	"encoding/json"
	"path"
	"strings"
)

// Wire APIs and their routes (kernel/config.InferenceRoutes).
const (
	Responses = "responses"
	Chat      = "chat"
	Messages  = "messages"
)

// Routes maps each wire API to the path it serves.
var Routes = map[string]string{
	Responses: "/v1/responses",
	Chat:      "/v1/chat/completions",
	Messages:  "/v1/messages",
}

// Script is what a fixture server answers, one turn per request.
type Script struct {
	Wire  string // Responses, Chat or Messages
	Model string // echoed in answers (default: the request's model)
	Turns []Turn
	// ToolLess answers a request that offers no tools (opencode's title
	// request) with this text, without consuming a turn. Empty: such a
	// request takes the next turn like any other.
	ToolLess string
	// PerConversation takes each request's turn from the conversation it
	// carries (the tool results in its history: turn n answers a request
	// with n of them) instead of from the order requests came in, so
	// agents running at once on one server each follow the script.
	PerConversation bool
}

// Turn is one answer: tool calls, or (without any) a final text.
type Turn struct {
	Tools []ToolCall
	Text  string
	Usage Usage
	// NoUsage leaves every usage field out of the answer.
	NoUsage bool
	// Hold, when set, is waited on after the first SSE event has been
	// written and flushed, before the rest: a test proves pass-through by
	// reading that first event before it releases Hold.
	Hold <-chan struct{}
	// Status, when not 0 or 200, is answered instead, with an error body.
	Status int
}

// ToolCall is one tool call in the wire API's own shape.
type ToolCall struct {
	Name string
	// Input is the tool's JSON arguments (function calls, tool_use).
	Input map[string]any
	// Custom, for Responses only: a custom_tool_call whose raw input is
	// CustomInput (Codex's apply_patch).
	Custom      bool
	CustomInput string
}

// Usage is what an answer reports.
type Usage struct {
	Input  int64
	Output int64
}

func (c ToolCall) arguments() string {
	b, _ := json.Marshal(c.Input)
	return string(b)
}

// The reference task (gates/scenario/fixture/repo): src/calc.sh adds one
// too many.
const (
	CalcFile = "src/calc.sh"
	CalcBug  = "$(($2 + $3 + 1))"
	CalcFix  = "$(($2 + $3))"
	// CalcPatch is the apply_patch body Codex's custom tool takes.
	CalcPatch = "*** Begin Patch\n*** Update File: src/calc.sh\n@@\n-add) echo $(($2 + $3 + 1)) ;;\n+add) echo $(($2 + $3)) ;;\n*** End Patch\n"
	// CalcSed makes the same change with a shell command.
	CalcSed = "sed -i 's/ + 1))/))/' src/calc.sh"
	// FixCalcModel is a model slug Codex knows (it offers apply_patch).
	FixCalcModel = "gpt-5.5"
	fixedText    = "Fixed the off-by-one in src/calc.sh."
	usageIn      = 1200
	usageOut     = 80
)

// FixCalc is the ready-made script that drives a real agent CLI to fix the
// reference repository checked out at workdir (the agent's working
// directory, e.g. /workspace):
//
//   - Responses (Codex): a custom_tool_call apply_patch, then a final text.
//   - Messages (Claude Code): Read then Edit (it edits only files it has
//     read), then a final text.
//   - Chat (opencode): read then edit with opencode's argument names
//     (filePath, oldString, newString), then a final text; a tool-less
//     title request is answered with text.
//
// Tool names are data: a test for another agent edits the returned turns.
func FixCalc(wire, workdir string) Script {
	file := path.Join(workdir, CalcFile)
	u := Usage{Input: usageIn, Output: usageOut}
	s := Script{Wire: wire}
	switch wire {
	case Responses:
		s.Model = FixCalcModel
		s.Turns = []Turn{
			{Tools: []ToolCall{{Name: "apply_patch", Custom: true, CustomInput: CalcPatch}}, Usage: u},
			{Text: fixedText, Usage: u},
		}
	case Messages:
		s.Turns = []Turn{
			{Tools: []ToolCall{{Name: "Read", Input: map[string]any{"file_path": file}}}, Usage: u},
			{Tools: []ToolCall{{Name: "Edit", Input: map[string]any{"file_path": file, "old_string": CalcBug, "new_string": CalcFix}}}, Usage: u},
			{Text: fixedText, Usage: u},
		}
	case Chat:
		s.ToolLess = "Fix calc.sh"
		s.Turns = []Turn{
			{Tools: []ToolCall{{Name: "read", Input: map[string]any{"filePath": file}}}, Usage: u},
			{Tools: []ToolCall{{Name: "edit", Input: map[string]any{"filePath": file, "oldString": CalcBug, "newString": CalcFix}}}, Usage: u},
			{Text: fixedText, Usage: u},
		}
	}
	return s
}

// FixCalcAndTest is FixCalc for Responses (Codex) that then runs the
// repository's tests with exec_command ("make test"), as an agent checks
// its fix — in a repository whose tests need a dependency, the fetch goes
// through the episode's egress proxy.
func FixCalcAndTest(workdir string) Script {
	s := FixCalc(Responses, workdir)
	u := Usage{Input: usageIn, Output: usageOut}
	test := Turn{Tools: []ToolCall{{Name: "exec_command", Input: map[string]any{"cmd": "make test"}}}, Usage: u}
	s.Turns = append(s.Turns[:1:1], test, s.Turns[1])
	return s
}

// FixAndTest drives Codex (Responses) through a fix in any repository,
// as an agent does one: it runs test (exec_command), replaces the line bug
// of file (a path relative to the working directory) with fix through
// apply_patch, runs test again and ends with a text. Its turns are per
// conversation: several runs may share the server.
func FixAndTest(file, bug, fix, test string) Script {
	u := Usage{Input: usageIn, Output: usageOut}
	run := Turn{Tools: []ToolCall{{Name: "exec_command", Input: map[string]any{"cmd": test, "yield_time_ms": 120000}}}, Usage: u}
	patch := "*** Begin Patch\n*** Update File: " + file + "\n@@\n-" + bug + "\n+" + fix + "\n*** End Patch\n"
	return Script{Wire: Responses, Model: FixCalcModel, PerConversation: true, Turns: []Turn{
		run,
		{Tools: []ToolCall{{Name: "apply_patch", Custom: true, CustomInput: patch}}, Usage: u},
		run,
		{Text: "Fixed " + file + "; the tests pass.", Usage: u},
	}}
}

// FixCalcExec is FixCalc for Responses with exec_command and a sed instead
// of apply_patch (for a model slug Codex does not offer apply_patch to).
func FixCalcExec() Script {
	u := Usage{Input: usageIn, Output: usageOut}
	return Script{Wire: Responses, Turns: []Turn{
		{Tools: []ToolCall{{Name: "exec_command", Input: map[string]any{"cmd": CalcSed}}}, Usage: u},
		{Text: fixedText, Usage: u},
	}}
}

// toolResults counts the tool results in a request body's conversation,
// in the wire API's own shape: Responses input items of a *_output type,
// Messages tool_result content blocks, Chat messages of role tool.
func toolResults(wire string, body []byte) int {
	var req struct {
		Input    json.RawMessage `json:"input"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return 0
	}
	n := 0
	switch wire {
	case Responses:
		var items []struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(req.Input, &items)
		for _, it := range items {
			if strings.HasSuffix(it.Type, "_output") {
				n++
			}
		}
	case Messages:
		for _, m := range req.Messages {
			var blocks []struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(m.Content, &blocks)
			for _, b := range blocks {
				if b.Type == "tool_result" {
					n++
				}
			}
		}
	case Chat:
		for _, m := range req.Messages {
			if m.Role == "tool" {
				n++
			}
		}
	}
	return n
}
