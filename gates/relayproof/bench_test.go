package relayproof

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/entry"
	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/relay"
	"github.com/autonomic-kernel/autonomic/store"
)

// The whole in-domain path's cost (issue 13 §7), side by side in one run:
// each iteration makes the same Responses call (Codex's wire API) straight
// to the fixture over loopback TCP, through the relay's Unix socket, and
// through autonomic-entry's loopback bridge to that socket (what an agent
// in a domain does; here on the host, without the namespaces). Reported:
// each path's p50 and the p50 of each difference from the direct call.
// kernel/relay's BenchmarkRelayNonStreamed/FirstByte measure the relay
// alone.

func benchPaths(b *testing.B, stream bool) {
	os.Setenv("AUTONOMIC_BENCH_KEY", "sk-bench")
	up, err := fixturemodel.Start(fixturemodel.Script{Wire: fixturemodel.Responses, Turns: []fixturemodel.Turn{{Text: "ok", Usage: fixturemodel.Usage{Input: 10, Output: 2}}}})
	if err != nil {
		b.Fatal(err)
	}
	defer up.Close()
	ctx := context.Background()
	db := harness.Database(b, "b")
	s, err := store.Open(ctx, store.Config{URL: harness.Cluster.KernelConnString(db), AdminURL: harness.Cluster.AdminConnString(db),
		InstanceID: "relayproof-bench", OwnerTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ep, err := s.CreateEpisode(ctx, store.NewEpisode{})
	if err != nil {
		b.Fatal(err)
	}
	rl, err := relay.New(ctx, relay.Options{ProviderName: "fixture", EpisodeID: ep.ID, Ledger: s,
		Provider: config.Provider{WireAPI: config.WireResponses, Upstream: up.URL, CredentialEnv: "AUTONOMIC_BENCH_KEY",
			Models: []string{"gpt-5.5"}, Prices: map[string]config.Price{"gpt-5.5": {}}, MaxOutputTokens: 1000},
		Budget: &policy.Inference{Models: []string{"gpt-5.5"}, MaxTokens: 1 << 50, MaxSpendMicroUSD: 1 << 50}})
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(b.TempDir(), "inference.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	go rl.Serve(ln)
	defer rl.Close()
	br := entry.Bridge{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Socket: sock}
	bln, err := br.Listen()
	if err != nil {
		b.Fatal(err)
	}
	go br.Serve(bln)
	defer bln.Close()

	tcp := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}}
	unix := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	body := `{"model":"gpt-5.5","input":"hi","max_output_tokens":16}`
	if stream {
		body = `{"model":"gpt-5.5","input":"hi","max_output_tokens":16,"stream":true}`
	}
	route := "/v1/responses"
	paths := []struct {
		c   *http.Client
		url string
	}{{tcp, up.URL + route}, {unix, "http://relay" + route}, {tcp, "http://" + bln.Addr().String() + route}}
	for _, p := range paths { // warm every connection
		fixturemodel.TimeCall(b, p.c, p.url, body, stream)
	}
	var d, r, viaBridge, relayDiff, bridgeDiff []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dd := fixturemodel.TimeCall(b, paths[0].c, paths[0].url, body, stream)
		rr := fixturemodel.TimeCall(b, paths[1].c, paths[1].url, body, stream)
		bb := fixturemodel.TimeCall(b, paths[2].c, paths[2].url, body, stream)
		d, r, viaBridge = append(d, dd), append(r, rr), append(viaBridge, bb)
		relayDiff, bridgeDiff = append(relayDiff, rr-dd), append(bridgeDiff, bb-dd)
	}
	b.StopTimer()
	b.ReportMetric(fixturemodel.P50(d), "direct-p50-µs")
	b.ReportMetric(fixturemodel.P50(r), "relay-p50-µs")
	b.ReportMetric(fixturemodel.P50(viaBridge), "bridge+relay-p50-µs")
	b.ReportMetric(fixturemodel.P50(relayDiff), "relay-overhead-p50-µs")
	b.ReportMetric(fixturemodel.P50(bridgeDiff), "bridge+relay-overhead-p50-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPathsNonStreamed: a whole non-streamed answer on each path.
func BenchmarkPathsNonStreamed(b *testing.B) { benchPaths(b, false) }

// BenchmarkPathsFirstByte: time to a stream's first body byte on each path.
func BenchmarkPathsFirstByte(b *testing.B) { benchPaths(b, true) }
