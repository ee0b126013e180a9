package relay

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/kernel/config"
)

// The relay's cost, measured side by side in one run (issue 13 §7): each
// iteration makes the same call straight to the fixture over loopback TCP
// and through the relay's Unix socket (admission, a durable reservation in
// PostgreSQL, forwarding, usage parsing; the settlement runs after the
// answer). Reported: the p50 of each and of the difference.

func benchEnv(b *testing.B) (*env, *http.Client) {
	script := fixturemodel.Script{Wire: config.WireChat, Turns: []fixturemodel.Turn{{Text: "ok", Usage: fixturemodel.Usage{Input: 10, Output: 2}}}}
	e := newEnv(b, setup{wire: config.WireChat, script: script})
	direct := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}}
	return e, direct
}

func sideBySide(b *testing.B, stream bool) {
	e, direct := benchEnv(b)
	body := `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`
	if stream {
		body = `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true}`
	}
	route := config.InferenceRoutes[config.WireChat]
	// Warm both paths' connections.
	fixturemodel.TimeCall(b, direct, e.fixture.URL+route, body, stream)
	fixturemodel.TimeCall(b, e.client, "http://relay"+route, body, stream)
	var d, r, diff []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dd := fixturemodel.TimeCall(b, direct, e.fixture.URL+route, body, stream)
		rr := fixturemodel.TimeCall(b, e.client, "http://relay"+route, body, stream)
		d, r, diff = append(d, dd), append(r, rr), append(diff, rr-dd)
	}
	b.StopTimer()
	e.settled()
	b.ReportMetric(fixturemodel.P50(d), "direct-p50-µs")
	b.ReportMetric(fixturemodel.P50(r), "relay-p50-µs")
	b.ReportMetric(fixturemodel.P50(diff), "overhead-p50-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRelayNonStreamed: a whole non-streamed answer.
func BenchmarkRelayNonStreamed(b *testing.B) { sideBySide(b, false) }

// BenchmarkRelayFirstByte: time to a stream's first body byte.
func BenchmarkRelayFirstByte(b *testing.B) { sideBySide(b, true) }

// BenchmarkAdmit16MiB is admission's cost for a body at the default cap
// (16 MiB): the full-depth strict-JSON check plus the top-level read.
func BenchmarkAdmit16MiB(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"qwen","messages":[`)
	for i := 0; sb.Len() < config.DefaultRelayMaxRequestBytes-1024; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor sit amet ", 20) +
			`","tool_calls":[{"id":"call_1","type":"function","function":{"name":"shell","arguments":"{\"cmd\":[\"ls\"]}"}}]}`)
	}
	sb.WriteString(`],"max_tokens":16,"stream":true}`)
	body := []byte(sb.String())
	ru := &rules{routes: map[string]bool{"/v1/chat/completions": true}, models: map[string]bool{"qwen": true},
		maxBody: config.DefaultRelayMaxRequestBytes, maxQuery: 1024}
	h := http.Header{"Content-Type": {"application/json"}}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := admit(ru, "POST", "/v1/chat/completions", h, body); err != nil {
			b.Fatal(err)
		}
	}
}
