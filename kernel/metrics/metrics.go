package metrics

import (
	"context"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/store"
)

// Source is what a scrape reads.
type Source struct {
	// Counts reads the store's aggregates (store.Postgres.Counts).
	Counts func(ctx context.Context) (store.Counts, error)
	// Autonomy is the regulator's level, as a number (nil: not exported).
	Autonomy func() int
	// Saturations is Broker.Saturations (nil: not exported).
	Saturations func() uint64
}

// Metrics is one kernel's registry.
type Metrics struct {
	reg        *prometheus.Registry
	src        Source
	commit     *prometheus.HistogramVec
	launcher   *prometheus.HistogramVec
	storeRTT   prometheus.Histogram
	violations prometheus.Counter
	scrapeErr  prometheus.Counter
}

// actions are the launcher actions a label may name; any other is "other".
var (
	actions = map[string]bool{"create": true, "freeze": true, "thaw": true, "checkpoint": true, "restore": true,
		"destroy": true, "inspect": true, "preflight": true, "release": true, "import": true}
)

// New builds the registry.
func New(src Source) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), src: src}
	m.commit = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "autonomic_commit_seconds",
		Help: "Time an adapter took to commit an effect, by kind.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"kind"})
	m.launcher = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "autonomic_launcher_action_seconds",
		Help: "Time a launcher action took (create: until the worker started), by action.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"action"})
	m.storeRTT = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "autonomic_store_round_trip_seconds",
		Help: "Time the store took to answer the scrape's aggregate read.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.violations = prometheus.NewCounter(prometheus.CounterOpts{Name: "autonomic_violations_total",
		Help: "Kernel denials (seccomp violations) reported by workers' domains."})
	m.scrapeErr = prometheus.NewCounter(prometheus.CounterOpts{Name: "autonomic_scrape_store_errors_total",
		Help: "Scrapes whose store read failed (the store's series are then absent)."})
	m.reg.MustRegister(m.commit, m.launcher, m.storeRTT, m.violations, m.scrapeErr, collector{m},
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// SetAutonomy and SetSaturations name the readers serve has once the
// kernel is composed (the registry is built first, to observe it).
func (m *Metrics) SetAutonomy(f func() int)       { m.src.Autonomy = f }
func (m *Metrics) SetSaturations(f func() uint64) { m.src.Saturations = f }

// ObserveLauncher records one launcher action's duration (domain.Linux.Observe).
func (m *Metrics) ObserveLauncher(action string, d time.Duration) {
	if !actions[action] {
		action = "other"
	}
	m.launcher.WithLabelValues(action).Observe(d.Seconds())
}

// Violation counts one kernel denial.
func (m *Metrics) Violation() { m.violations.Inc() }

// Adapter wraps a broker adapter so that its commits are timed by kind.
func (m *Metrics) Adapter(a broker.Adapter) broker.Adapter { return timed{Adapter: a, m: m} }

type timed struct {
	broker.Adapter
	m *Metrics
}

func (t timed) Commit(ctx context.Context, r broker.Request) broker.Result {
	start := time.Now()
	res := t.Adapter.Commit(ctx, r)
	t.m.commit.WithLabelValues(t.Adapter.Kind()).Observe(time.Since(start).Seconds())
	return res
}

// Unwrap lets the broker reach the adapter's own interfaces (Toucher).
func (t timed) Unwrap() broker.Adapter { return t.Adapter }

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Timeout: 10 * time.Second}))
	return mux
}

// Listen binds addr: "unix:/abs/path" or a loopback host:port.
func Listen(addr string) (net.Listener, error) {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		return net.Listen("unix", p)
	}
	return net.Listen("tcp", addr)
}

// Serve serves the registry on l until ctx ends.
func (m *Metrics) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// collector reads the scrape-time series.
type collector struct{ m *Metrics }

var (
	descEpisodes = prometheus.NewDesc("autonomic_episodes", "Episodes by state.", []string{"state"}, nil)
	descEffects  = prometheus.NewDesc("autonomic_effects", "Effects by kind and state.", []string{"kind", "state"}, nil)
	descRepairs  = prometheus.NewDesc("autonomic_repairs_total", "Repairs (epochs advanced) recorded in the ledger.", nil, nil)
	descTokens   = prometheus.NewDesc("autonomic_relay_tokens_total", "Tokens charged by the inference relay, by provider and model.", []string{"provider", "model"}, nil)
	descSpend    = prometheus.NewDesc("autonomic_relay_spend_micro_usd_total", "Spend charged by the inference relay, in micro-USD, by provider and model.", []string{"provider", "model"}, nil)
	descCalls    = prometheus.NewDesc("autonomic_relay_calls_total", "Inference calls relayed, by provider and model.", []string{"provider", "model"}, nil)
	descAutonomy = prometheus.NewDesc("autonomic_autonomy_level", "The system regulator's autonomy level (0 observe … act).", nil, nil)
	descSat      = prometheus.NewDesc("autonomic_broker_saturations_total", "Worker connections the broker refused as saturated.", nil, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEpisodes, descEffects, descRepairs, descTokens, descSpend, descCalls, descAutonomy, descSat} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	if m.src.Autonomy != nil {
		ch <- prometheus.MustNewConstMetric(descAutonomy, prometheus.GaugeValue, float64(m.src.Autonomy()))
	}
	if m.src.Saturations != nil {
		ch <- prometheus.MustNewConstMetric(descSat, prometheus.CounterValue, float64(m.src.Saturations()))
	}
	if m.src.Counts == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	counts, err := m.src.Counts(ctx)
	m.storeRTT.Observe(time.Since(start).Seconds())
	if err != nil {
		m.scrapeErr.Inc()
		return
	}
	for _, s := range []string{"active", "completed", "contained", "aborted"} {
		ch <- prometheus.MustNewConstMetric(descEpisodes, prometheus.GaugeValue, float64(counts.Episodes[s]), s)
	}
	for _, e := range counts.Effects {
		ch <- prometheus.MustNewConstMetric(descEffects, prometheus.GaugeValue, float64(e.N), e.Kind, e.State)
	}
	ch <- prometheus.MustNewConstMetric(descRepairs, prometheus.CounterValue, float64(counts.Repairs))
	for _, r := range counts.Relay {
		ch <- prometheus.MustNewConstMetric(descTokens, prometheus.CounterValue, float64(r.Tokens), r.Provider, r.Model)
		ch <- prometheus.MustNewConstMetric(descSpend, prometheus.CounterValue, float64(r.SpendMicroUSD), r.Provider, r.Model)
		ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(r.Calls), r.Provider, r.Model)
	}
}
