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
