package relay

import (
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/config"
)

func track(wire string, sse bool, body []byte, chunk int) usage {
	t := &tracker{wire: wire, sse: sse}
	for len(body) > 0 {
		n := min(chunk, len(body))
		t.write(body[:n])
		body = body[n:]
	}
	return t.finish()
}

func TestUsageFromEachWireAPI(t *testing.T) {
	cases := []struct {
		name, wire string
		sse        bool
		body       string
		want       usage
	}{
		{"responses stream", config.WireResponses, true, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":3,\"total_tokens\":13}}}\n\n",
			usage{reported: true, input: 10, output: 3}},
		{"chat stream", config.WireChat, true, "data: {\"choices\":[{\"delta\":{\"content\":\"usage\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
			usage{reported: true, input: 7, output: 2}},
		{"messages stream", config.WireMessages, true, "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\r\n\r\n" +
			"event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"output_tokens\":40}}\r\n\r\n",
			usage{reported: true, input: 105, output: 40}},
		{"messages cut before message_delta", config.WireMessages, true, "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n", usage{seenInput: 5}},
		{"responses without completed", config.WireResponses, true, "data: {\"type\":\"response.output_item.done\",\"item\":{\"usage\":{\"input_tokens\":1}}}\n\n", usage{}},
		{"json answer", config.WireChat, false, `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}`, usage{reported: true, input: 3, output: 4}},
		{"json without usage", config.WireResponses, false, `{"output":[]}`, usage{}},
		{"negative counts", config.WireChat, false, `{"usage":{"prompt_tokens":-3,"completion_tokens":4}}`, usage{reported: true, input: 0, output: 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, chunk := range []int{1, 3, 7, 64, 1 << 20} {
				if got := track(c.wire, c.sse, []byte(c.body), chunk); got != c.want {
					t.Fatalf("chunk %d: %+v, want %+v", chunk, got, c.want)
				}
			}
		})
	}
}

// FuzzTracker: whatever an upstream sends, in whatever pieces, the tracker
// never panics, never reports negative usage, and reads the same usage
// however the bytes are split.
func FuzzTracker(f *testing.F) {
	f.Add(uint8(0), true, []byte("data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":3}}}\n\n"), uint8(5))
	f.Add(uint8(1), true, []byte("data: {\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n"), uint8(1))
	f.Add(uint8(2), true, []byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4}}\n"), uint8(9))
	f.Add(uint8(1), false, []byte(`{"usage":{"prompt_tokens":1e400}}`), uint8(2))
	wires := []string{config.WireResponses, config.WireChat, config.WireMessages}
	f.Fuzz(func(t *testing.T, w uint8, sse bool, body []byte, chunk uint8) {
		wire := wires[int(w)%len(wires)]
		whole := track(wire, sse, body, len(body)+1)
		split := track(wire, sse, body, int(chunk)%17+1)
		if whole != split {
			t.Fatalf("split changes usage: %+v vs %+v", whole, split)
		}
		if whole.input < 0 || whole.output < 0 || !whole.reported && (whole.input != 0 || whole.output != 0) {
			t.Fatalf("usage %+v", whole)
		}
	})
}

func TestUsageCountsAreBounded(t *testing.T) {
	got := track(config.WireMessages, false, []byte(`{"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807,"output_tokens":9223372036854775807}}`), 1<<20)
	if !got.reported || got.input != 2*maxCount || got.output != maxCount {
		t.Fatalf("%+v", got)
	}
}
