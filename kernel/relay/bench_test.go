package relay

import (
	"bufio"
	"io"
	"net/http"
	"slices"
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

func timed(b *testing.B, c *http.Client, url, body string, firstByte bool) time.Duration {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var d time.Duration
	if firstByte {
		if _, err := bufio.NewReader(resp.Body).ReadByte(); err != nil {
			b.Fatal(err)
		}
		d = time.Since(start)
		io.Copy(io.Discard, resp.Body)
	} else {
		io.Copy(io.Discard, resp.Body)
		d = time.Since(start)
	}
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return d
}

func p50(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds())
}

func sideBySide(b *testing.B, stream bool) {
	e, direct := benchEnv(b)
	body := `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`
	if stream {
		body = `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true}`
	}
	route := config.InferenceRoutes[config.WireChat]
	// Warm both paths' connections.
	timed(b, direct, e.fixture.URL+route, body, stream)
	timed(b, e.client, "http://relay"+route, body, stream)
	var d, r, diff []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dd := timed(b, direct, e.fixture.URL+route, body, stream)
		rr := timed(b, e.client, "http://relay"+route, body, stream)
		d, r, diff = append(d, dd), append(r, rr), append(diff, rr-dd)
	}
	b.StopTimer()
	e.settled()
	b.ReportMetric(p50(d), "direct-p50-µs")
	b.ReportMetric(p50(r), "relay-p50-µs")
	b.ReportMetric(p50(diff), "overhead-p50-µs")
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
