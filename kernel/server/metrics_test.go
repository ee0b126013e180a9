package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/autonomic-kernel/autonomic/kernel/server/servertest"
)

// TestMetricsScrape: a kernel serving api.metrics_listen answers GET
// /metrics in Prometheus' text format with the kernel's series under
// their names and types, and the store's series move when an episode and
// its effect are recorded; no series carries an id in its labels.
func TestMetricsScrape(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sock := filepath.Join(t.TempDir(), "metrics.sock")
	setup := servertest.New(t, "metrics", map[string]any{"api": map[string]any{"metrics_listen": "unix:" + sock}})
	stop, err := Start(ctx, setup.Config, hclog.NewNullLogger(), Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		resp, err := c.Get("http://metrics/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("scrape: %d %s", resp.StatusCode, body)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			t.Fatalf("not the text format: %v", err)
		}
		return fams
	}
	value := func(f map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
		fam, ok := f[name]
		if !ok {
			return -1
		}
	next:
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		return 0
	}
	before := scrape()
	for name, typ := range map[string]dto.MetricType{
		"autonomic_episodes": dto.MetricType_GAUGE, "autonomic_repairs_total": dto.MetricType_COUNTER,
		"autonomic_store_round_trip_seconds": dto.MetricType_HISTOGRAM, "autonomic_broker_saturations_total": dto.MetricType_COUNTER,
		"autonomic_violations_total": dto.MetricType_COUNTER,
	} {
		if f, ok := before[name]; !ok || f.GetType() != typ {
			t.Errorf("%s: missing or not a %s", name, typ)
		}
	}
	active := value(before, "autonomic_episodes", map[string]string{"state": "active"})

	// An episode and its effect, recorded as the kernel records them.
	_, ep, _ := servertest.SeedEffect(t, ctx, setup.Cluster.KernelConnString(setup.DB))
	after := scrape()
	if got := value(after, "autonomic_episodes", map[string]string{"state": "active"}); got != active+1 {
		t.Errorf("active episodes %v after one was created, want %v", got, active+1)
	}
	if got := value(after, "autonomic_effects", map[string]string{"kind": "git_commit", "state": "proposed"}); got != 1 {
		t.Errorf("proposed git_commit effects: %v, want 1", got)
	}
	if got, was := value(after, "autonomic_store_round_trip_seconds", nil), value(before, "autonomic_store_round_trip_seconds", nil); got <= was {
		t.Errorf("store round trips %v, then %v: the scrape did not time its read", was, got)
	}
	for name, f := range after {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if strings.Contains(l.GetValue(), ep.ID.String()) || len(l.GetValue()) == 36 && strings.Count(l.GetValue(), "-") == 4 {
					t.Errorf("%s carries an id in label %s=%s", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}
