package fixturemodel

import (
	"bufio"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TimeCall makes one JSON POST of body to url, as an agent calls its
// provider, and returns the time to the whole answer or, with firstByte, to
// the first byte of its body (a stream's first event). Anything but 200
// fails tb. The relay's and the in-domain path's benchmarks share it.
func TimeCall(tb testing.TB, c *http.Client, url, body string, firstByte bool) time.Duration {
	tb.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var d time.Duration
	if firstByte {
		if _, err := bufio.NewReader(resp.Body).ReadByte(); err != nil {
			tb.Fatal(err)
		}
		d = time.Since(start)
		io.Copy(io.Discard, resp.Body)
	} else {
		io.Copy(io.Discard, resp.Body)
		d = time.Since(start)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("%s: status %d", url, resp.StatusCode)
	}
	return d
}

// P50 is the median of ds in microseconds, as b.ReportMetric takes it.
func P50(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds())
}
