package relay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/storetest"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
)

var harness *storetest.Shared

func TestMain(m *testing.M) {
	harness = storetest.StartShared("autonomic-relay-")
	os.Exit(harness.Run(m))
}

const (
	serverKey   = "sk-server-7f3a-real-key"
	placeholder = "sk-placeholder-in-domain"
)

// env is one episode: a store, a fixture upstream and a relay on a real
// Unix socket, with a client that speaks HTTP over it.
type env struct {
	t       testing.TB
	store   *store.Postgres
	episode uuid.UUID
	fixture *fixturemodel.Server
	relay   *Relay
	sock    string
	client  *http.Client
	signals atomic.Int32
}

type setup struct {
	wire   string
	script fixturemodel.Script
	budget *policy.Inference
	prices map[string]config.Price
	// upstream overrides the fixture's URL (a dead port).
	upstream string
	maxBody  int
	log      hclog.Logger
	// Connection bounds (Options), zero for the defaults.
	maxConcurrent         int
	readTimeout, idleTime time.Duration
	// memory is the kernel-wide bound the relay shares (nil: its own).
	memory *Memory
}

func openStore(t testing.TB) *store.Postgres {
	t.Helper()
	db := harness.Database(t, "r")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, store.Config{URL: harness.Cluster.KernelConnString(db), AdminURL: harness.Cluster.AdminConnString(db),
		InstanceID: "kernel-relay-test", OwnerTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func newEnv(t testing.TB, su setup) *env {
	t.Helper()
	e := &env{t: t, store: openStore(t)}
	ctx := context.Background()
	ep, err := e.store.CreateEpisode(ctx, store.NewEpisode{})
	if err != nil {
		t.Fatal(err)
	}
	e.episode = ep.ID
	if su.script.Wire == "" {
		su.script = fixturemodel.FixCalc(su.wire, "/workspace")
	}
	if e.fixture, err = fixturemodel.Start(su.script); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.fixture.Close() })
	if su.budget == nil {
		su.budget = &policy.Inference{Models: []string{"gpt-5.5", "claude-x", "qwen"}, MaxTokens: 1 << 40, MaxSpendMicroUSD: 1 << 40}
	}
	if su.prices == nil {
		su.prices = map[string]config.Price{"gpt-5.5": {InputMicroUSDPerMTok: 1_250_000, OutputMicroUSDPerMTok: 10_000_000},
			"claude-x": {}, "qwen": {}, "not-in-policy": {}}
	}
	up := e.fixture.URL
	if su.upstream != "" {
		up = su.upstream
	}
	p := config.Provider{WireAPI: su.wire, Upstream: up, CredentialEnv: "RELAY_TEST_KEY",
		Models: []string{"gpt-5.5", "claude-x", "qwen", "not-in-policy"}, Prices: su.prices,
		MaxRequestBytes: su.maxBody, MaxOutputTokens: 1000, HeaderTimeoutMS: 5000}
	if p.MaxRequestBytes == 0 {
		p.MaxRequestBytes = 64 << 10
	}
	e.relay, err = New(ctx, Options{ProviderName: "fixture", Provider: p, EpisodeID: ep.ID, Budget: su.budget, Ledger: e.store,
		OnExhausted: func(Exhausted) { e.signals.Add(1) }, Log: su.log,
		MaxConcurrent: su.maxConcurrent, ReadTimeout: su.readTimeout, IdleTimeout: su.idleTime, Memory: su.memory,
		Getenv: func(k string) string {
			if k == "RELAY_TEST_KEY" {
				return serverKey
			}
			return ""
		}})
	if err != nil {
		t.Fatal(err)
	}
	e.sock = filepath.Join(t.TempDir(), "inference.sock")
	ln, err := net.Listen("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	go e.relay.Serve(ln)
	t.Cleanup(func() { e.relay.Close() })
	e.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", e.sock)
		},
		DisableCompression: true,
	}}
	return e
}

// raw sends one request exactly as written (the request target is not
// normalised by any client library) and returns the response.
func (e *env) raw(method, target, ctype, body string, extra ...string) (*http.Response, []byte) {
	e.t.Helper()
	c, err := net.Dial("unix", e.sock)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer %s\r\nx-api-key: %s\r\n", method, target, placeholder, placeholder)
	if ctype != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\n", ctype)
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func (e *env) post(path, body string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", "http://127.0.0.1:8787"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+placeholder)
	req.Header.Set("x-api-key", placeholder)
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

// settled waits for every settlement of calls answered so far.
func (e *env) settled() {
	e.relay.mu.Lock()
	e.relay.mu.Unlock()
	e.relay.settling.Wait()
}

// used is what the episode's budget has been used for: the durable charge
// less the relay's unspent pool.
func (e *env) used() int64 {
	e.t.Helper()
	e.settled()
	b, err := e.store.GetRelayBudget(context.Background(), e.episode)
	if err != nil {
		e.t.Fatal(err)
	}
	e.relay.poolMu.Lock()
	defer e.relay.poolMu.Unlock()
	return b.Tokens - e.relay.pool.Tokens
}

func errCode(t testing.TB, body []byte) string {
	t.Helper()
	var eb errorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Type != "error" || eb.Error.Code == "" || eb.Error.Message == "" {
		t.Fatalf("not a JSON error body: %q (%v)", body, err)
	}
	return eb.Error.Code
}

func TestRouteTable(t *testing.T) {
	e := newEnv(t, setup{wire: config.WireResponses})
	const ok = `{"model":"gpt-5.5","input":"hi","max_output_tokens":50}`
	const js = "application/json"
	cases := []struct {
		name, method, target, ctype, body string
		status                            int
		code                              string
		extra                             []string
	}{
		{"GET", "GET", "/v1/responses", js, "", 405, "route_refused", nil},
		{"PUT", "PUT", "/v1/responses", js, ok, 405, "route_refused", nil},
		{"DELETE", "DELETE", "/v1/responses", js, "", 405, "route_refused", nil},
		{"CONNECT", "CONNECT", "api.openai.com:443", "", "", 405, "route_refused", nil},
		{"other api route", "POST", "/v1/chat/completions", js, ok, 404, "route_refused", nil},
		{"files", "POST", "/v1/files", js, ok, 404, "route_refused", nil},
		{"models list", "POST", "/v1/models", js, ok, 404, "route_refused", nil},
		{"prefix", "POST", "/v1/responses/abc/cancel", js, ok, 404, "route_refused", nil},
		{"trailing slash", "POST", "/v1/responses/", js, ok, 404, "route_refused", nil},
		{"dotted", "POST", "/v1/responses/../files", js, ok, 404, "route_refused", nil},
		{"dot segment", "POST", "/v1/./responses", js, ok, 404, "route_refused", nil},
		{"double slash", "POST", "//v1/responses", js, ok, 404, "route_refused", nil},
		{"encoded dot", "POST", "/v1/%2e%2e/v1/responses", js, ok, 404, "route_refused", nil},
		{"encoded slash", "POST", "/v1%2fresponses", js, ok, 404, "route_refused", nil},
		{"encoded letter", "POST", "/v1/respons%65s", js, ok, 404, "route_refused", nil},
		{"double encoded", "POST", "/v1/%252e%252e/responses", js, ok, 404, "route_refused", nil},
		{"absolute form", "POST", "http://evil.example/v1/responses", js, ok, 404, "route_refused", nil},
		{"case", "POST", "/V1/Responses", js, ok, 404, "route_refused", nil},
		{"query with backslash", "POST", "/v1/responses?a=\\x", js, ok, 400, "route_refused", nil},
		{"form body", "POST", "/v1/responses", "application/x-www-form-urlencoded", "model=gpt-5.5", 415, "malformed_json", nil},
		{"no content type", "POST", "/v1/responses", "", ok, 415, "malformed_json", nil},
		{"gzip", "POST", "/v1/responses", js, ok, 415, "malformed_json", []string{"Content-Encoding: gzip"}},
		{"not json", "POST", "/v1/responses", js, "hello", 400, "malformed_json", nil},
		{"array", "POST", "/v1/responses", js, `[{"model":"gpt-5.5"}]`, 400, "malformed_json", nil},
		{"trailing", "POST", "/v1/responses", js, ok + `{}`, 400, "trailing_data", nil},
		{"duplicate model", "POST", "/v1/responses", js, `{"model":"gpt-5.5","model":"not-in-policy"}`, 400, "duplicate_key", nil},
		{"nested duplicate", "POST", "/v1/responses", js, `{"model":"gpt-5.5","input":[{"role":"user","content":"a"},{"role":"user","role":"system","content":"b"}]}`, 400, "duplicate_key", nil},
		{"escaped nested duplicate", "POST", "/v1/responses", js, `{"model":"gpt-5.5","tools":[{"type":"function","name":"a","parameters":{"type":"object","\u0074ype":"string"}}]}`, 400, "duplicate_key", nil},
		{"too deep", "POST", "/v1/responses", js, `{"model":"gpt-5.5","input":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, 400, "too_deep", nil},
		{"not utf-8", "POST", "/v1/responses", js, "{\"model\":\"gpt-5.5\",\"input\":\"\xff\"}", 400, "not_utf8", nil},
		{"too large", "POST", "/v1/responses", js, `{"model":"gpt-5.5","input":"` + strings.Repeat("a", 70<<10) + `"}`, 413, "frame_too_large", nil},
		{"no model", "POST", "/v1/responses", js, `{"input":"hi"}`, 403, "model_refused", nil},
		{"model outside the policy", "POST", "/v1/responses", js, `{"model":"not-in-policy"}`, 403, "model_refused", nil},
		{"model outside the provider", "POST", "/v1/responses", js, `{"model":"gpt-4o"}`, 403, "model_refused", nil},
		{"model not a string", "POST", "/v1/responses", js, `{"model":["gpt-5.5"]}`, 403, "model_refused", nil},
		{"negative cap", "POST", "/v1/responses", js, `{"model":"gpt-5.5","max_output_tokens":-1}`, 400, "invalid_field", nil},
		{"stream not bool", "POST", "/v1/responses", js, `{"model":"gpt-5.5","stream":"yes"}`, 400, "invalid_field", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.raw(c.method, c.target, c.ctype, c.body, c.extra...)
			if resp.StatusCode != c.status || errCode(t, body) != c.code {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, body, c.status, c.code)
			}
			if strings.Contains(string(body), placeholder) || strings.Contains(string(body), serverKey) {
				t.Fatalf("error body echoes a key: %s", body)
			}
		})
	}
	if n := e.fixture.Calls(); n != 0 {
		t.Fatalf("refused requests reached the upstream: %d", n)
	}
	// Each refusal is an inference_refused event in the episode's ledger,
	// in order, with its code and status and nothing of the body.
	events, err := e.store.Events(context.Background(), e.relay.opts.EpisodeID)
	if err != nil {
		t.Fatal(err)
	}
	var refused []map[string]any
	for _, ev := range events {
		if ev.Kind == "inference_refused" {
			var b map[string]any
			if err := json.Unmarshal(ev.Body, &b); err != nil {
				t.Fatal(err)
			}
			refused = append(refused, b)
		}
	}
	if len(refused) != len(cases) {
		t.Fatalf("the ledger holds %d refusals, want %d", len(refused), len(cases))
	}
	for i, c := range cases {
		b := refused[i]
		if b["code"] != c.code || b["status"] != float64(c.status) || b["method"] != c.method || b["provider"] != "fixture" {
			t.Errorf("refusal %d (%s) recorded as %v", i, c.name, b)
		}
		if route, _, _ := strings.Cut(c.target, "?"); b["route"] != route {
			t.Errorf("refusal %d (%s) route %v", i, c.name, b["route"])
		}
		if len(b) != 6 {
			t.Errorf("refusal %d (%s) records more than provider, method, route, model, code, status: %v", i, c.name, b)
		}
		want := ""
		switch c.name {
		case "model outside the policy":
			want = "not-in-policy"
		case "model outside the provider":
			want = "gpt-4o"
		case "negative cap", "stream not bool":
			want = "gpt-5.5"
		}
		if b["model"] != want {
			t.Errorf("refusal %d (%s) records model %v, want %q", i, c.name, b["model"], want)
		}
	}
	// The same connection path admits the real route, query kept.
	resp, body := e.raw("POST", "/v1/responses?x=1", "application/json; charset=utf-8", ok)
	if resp.StatusCode != 200 || !json.Valid(body) {
		t.Fatalf("allowed call: %d %s", resp.StatusCode, body)
	}
	reqs := e.fixture.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/responses" || reqs[0].RawQuery != "x=1" {
		t.Fatalf("upstream saw %+v", reqs)
	}
}

func TestKeyInjection(t *testing.T) {
	for _, tc := range []struct{ wire, model, header, want string }{
		{config.WireResponses, "gpt-5.5", "Authorization", "Bearer " + serverKey},
		{config.WireChat, "qwen", "Authorization", "Bearer " + serverKey},
		{config.WireMessages, "claude-x", "X-Api-Key", serverKey},
	} {
		t.Run(tc.wire, func(t *testing.T) {
			e := newEnv(t, setup{wire: tc.wire})
			route := config.InferenceRoutes[tc.wire]
			if tc.wire == config.WireMessages {
				route += "?beta=true"
			}
			resp, body := e.post(route, `{"model":"`+tc.model+`","max_tokens":100,"tools":[{}]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			reqs := e.fixture.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d upstream calls", len(reqs))
			}
			h := reqs[0].Header
			if h.Get(tc.header) != tc.want {
				t.Fatalf("upstream %s = %q", tc.header, h.Get(tc.header))
			}
			for k, vs := range h {
				for _, v := range vs {
					if strings.Contains(v, placeholder) {
						t.Fatalf("the placeholder reached the upstream in %s", k)
					}
				}
			}
			if tc.wire == config.WireMessages && (h.Get("Authorization") != "" || reqs[0].RawQuery != "beta=true" || h.Get("Anthropic-Version") == "") {
				t.Fatalf("messages headers %v query %q", h, reqs[0].RawQuery)
			}
			if strings.Contains(string(body), serverKey) {
				t.Fatal("the key came back to the worker")
			}
		})
	}
}

// The worker reads the first event while the fixture is still holding the
// rest: nothing between them buffers the stream.
func TestStreamPassesThrough(t *testing.T) {
	for _, wire := range []string{config.WireResponses, config.WireChat, config.WireMessages} {
		t.Run(wire, func(t *testing.T) {
			hold := make(chan struct{})
			script := fixturemodel.FixCalc(wire, "/workspace")
			script.Turns[0].Hold = hold
			e := newEnv(t, setup{wire: wire, script: script})
			model := map[string]string{config.WireResponses: "gpt-5.5", config.WireChat: "qwen", config.WireMessages: "claude-x"}[wire]
			req, _ := http.NewRequest("POST", "http://relay"+config.InferenceRoutes[wire], strings.NewReader(`{"model":"`+model+`","stream":true,"tools":[{}]}`))
			req.Header.Set("Content-Type", "application/json")
			// Headers and the first event must both arrive while the
			// fixture holds the rest of the stream.
			type got struct {
				line string
				br   *bufio.Reader
				body io.Closer
				err  error
			}
			first := make(chan got, 1)
			go func() {
				resp, err := e.client.Do(req)
				if err != nil {
					first <- got{err: err}
					return
				}
				br := bufio.NewReader(resp.Body)
				for {
					line, err := br.ReadString('\n')
					if err != nil || strings.HasPrefix(line, "data:") {
						first <- got{line: line, br: br, body: resp.Body, err: err}
						return
					}
				}
			}()
			var g got
			select {
			case g = <-first:
				if g.err != nil || !strings.HasPrefix(g.line, "data:") {
					t.Fatalf("first line %q: %v", g.line, g.err)
				}
			case <-time.After(5 * time.Second):
				close(hold)
				t.Fatal("the first event did not arrive while the upstream held the rest: the relay buffers")
			}
			defer g.body.Close()
			br := g.br
			close(hold)
			rest, _ := io.ReadAll(br)
			if !strings.Contains(string(rest), "usage") {
				t.Fatalf("rest of stream: %s", rest)
			}
			e.settled()
			calls, err := e.store.RelayCalls(context.Background(), e.episode)
			if err != nil || len(calls) != 1 || !calls[0].UsageReported ||
				calls[0].InputTokens != 1200 || calls[0].OutputTokens != 80 || calls[0].Charged.Tokens != 1280 {
				t.Fatalf("ledger %+v %v", calls, err)
			}
		})
	}
}

func TestBudgetReserveSettleExhaust(t *testing.T) {
	script := fixturemodel.Script{Wire: config.WireResponses, Turns: []fixturemodel.Turn{
		{Text: "a", Usage: fixturemodel.Usage{Input: 100, Output: 50}},
		{Text: "b", NoUsage: true},
		{Text: "c", Usage: fixturemodel.Usage{Input: 100, Output: 50}},
	}}
	// Each call reserves its body's bytes plus max_output_tokens (500).
	const body = `{"model":"gpt-5.5","input":"hi","max_output_tokens":500,"stream":true}`
	reserve := int64(len(body) + 500)
	budget := &policy.Inference{Models: []string{"gpt-5.5"}, MaxTokens: 150 + reserve + reserve, MaxSpendMicroUSD: 1 << 30}
	e := newEnv(t, setup{wire: config.WireResponses, script: script, budget: budget})
	ctx := context.Background()

	if resp, b := e.post("/v1/responses", body); resp.StatusCode != 200 {
		t.Fatalf("call 1: %d %s", resp.StatusCode, b)
	}
	e.settled()
	if u := e.used(); u != 150 {
		t.Fatalf("settled on usage: used %d, want 150", u)
	}
	// No usage: the whole reservation stays charged.
	if resp, b := e.post("/v1/responses", body); resp.StatusCode != 200 {
		t.Fatalf("call 2: %d %s", resp.StatusCode, b)
	}
	e.settled()
	if u := e.used(); u != 150+reserve {
		t.Fatalf("no-usage call: used %d, want %d", u, 150+reserve)
	}
	// Exactly one more reservation fits; it settles at 150, and then a
	// bigger call cannot fit.
	if resp, b := e.post("/v1/responses", body); resp.StatusCode != 200 {
		t.Fatalf("call 3: %d %s", resp.StatusCode, b)
	}
	e.settled()
	big := `{"model":"gpt-5.5","input":"hi","max_output_tokens":100000}`
	for range 3 {
		resp, out := e.post("/v1/responses", big)
		if resp.StatusCode != http.StatusForbidden || errCode(t, out) != "budget_exhausted" {
			t.Fatalf("over budget: %d %s", resp.StatusCode, out)
		}
	}
	if n := e.fixture.Calls(); n != 3 {
		t.Fatalf("upstream calls %d, want 3", n)
	}
	if n := e.signals.Load(); n != 1 {
		t.Fatalf("OnExhausted called %d times, want 1", n)
	}
	calls, err := e.store.RelayCalls(ctx, e.episode)
	if err != nil || len(calls) != 3 {
		t.Fatalf("ledger %v %v", calls, err)
	}
	for i, c := range calls {
		if c.Route != "/v1/responses" || c.Model != "gpt-5.5" || c.Status != 200 || c.Reserved.Tokens != reserve ||
			!strings.HasPrefix(c.RequestDigest, "sha256:") || !strings.HasPrefix(c.ResponseDigest, "sha256:") {
			t.Fatalf("call %d: %+v", i, c)
		}
	}
	if calls[0].Charged.Spend != spend(config.Price{InputMicroUSDPerMTok: 1_250_000, OutputMicroUSDPerMTok: 10_000_000}, 100, 50) ||
		calls[1].UsageReported || calls[1].Charged.Tokens != reserve || calls[2].Charged.Tokens != 150 {
		t.Fatalf("spend %+v", calls)
	}
	// Closing gives back the pool: the durable charge is what was used.
	e.relay.Close()
	if b, err := e.store.GetRelayBudget(ctx, e.episode); err != nil || b.Tokens != 300+reserve {
		t.Fatalf("after close: %+v %v, want %d", b, err, 300+reserve)
	}
	// A kernel restart cannot reset it: a new relay on the same episode
	// refuses as well.
	again, err := New(ctx, Options{ProviderName: "fixture", Provider: e.relay.opts.Provider, EpisodeID: e.episode, Budget: budget,
		Ledger: e.store, Getenv: e.relay.opts.Getenv})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "again.sock")
	ln, _ := net.Listen("unix", sock)
	go again.Serve(ln)
	defer again.Close()
	e.sock = sock
	if resp, out := e.raw("POST", "/v1/responses", "application/json", big); resp.StatusCode != http.StatusForbidden || errCode(t, out) != "budget_exhausted" {
		t.Fatalf("after restart: %d %s", resp.StatusCode, out)
	}
}

func TestNoPolicyNoInference(t *testing.T) {
	e := newEnv(t, setup{wire: config.WireChat})
	e.relay.Close()
	r, err := New(context.Background(), Options{ProviderName: "fixture", Provider: e.relay.opts.Provider, EpisodeID: e.episode,
		Ledger: e.store, Getenv: e.relay.opts.Getenv})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "none.sock")
	ln, _ := net.Listen("unix", sock)
	go r.Serve(ln)
	defer r.Close()
	e.sock = sock
	resp, out := e.raw("POST", "/v1/chat/completions", "application/json", `{"model":"qwen"}`)
	if resp.StatusCode != 403 || errCode(t, out) != "model_refused" || e.fixture.Calls() != 0 {
		t.Fatalf("%d %s, %d upstream calls", resp.StatusCode, out, e.fixture.Calls())
	}
}

func TestUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	e := newEnv(t, setup{wire: config.WireMessages, upstream: dead})
	start := time.Now()
	resp, out := e.post("/v1/messages?beta=true", `{"model":"claude-x","max_tokens":10,"stream":true}`)
	if resp.StatusCode != http.StatusBadGateway || errCode(t, out) != "target_unavailable" {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a dead upstream took %v to report", d)
	}
	e.settled()
	// Nothing reached a provider: the reservation is released.
	calls, err := e.store.RelayCalls(context.Background(), e.episode)
	if u := e.used(); err != nil || u != 0 || len(calls) != 1 || calls[0].Status != 502 || calls[0].Charged.Tokens != 0 {
		t.Fatalf("used %d calls %+v %v", u, calls, err)
	}
}

func TestCredentialFile(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte(serverKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := credential(config.Provider{CredentialFile: key}, nil)
	if err != nil || got != serverKey {
		t.Fatalf("%q %v", got, err)
	}
	os.Chmod(key, 0o640)
	if _, err := credential(config.Provider{CredentialFile: key}, nil); err == nil {
		t.Fatal("a group-readable key file was accepted")
	}
	if _, err := credential(config.Provider{CredentialEnv: "NOPE"}, func(string) string { return "" }); err == nil {
		t.Fatal("an empty credential variable was accepted")
	}
	os.Chmod(key, 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink("/proc/self/environ", link)
	if _, err := credential(config.Provider{CredentialFile: link}, nil); err == nil || strings.Contains(err.Error(), serverKey) {
		t.Fatalf("a symlink to a foreign file: %v", err)
	}
}

// The relay's log, at trace level, carries no prompt, no completion, no key
// and no placeholder: only route, model, counts, digests and timings.
func TestLogCarriesNoContent(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})})
	const prompt = "PROMPT-MARKER-4411"
	e := newEnv(t, setup{wire: config.WireMessages, log: log})
	resp, body := e.post("/v1/messages?beta=true", `{"model":"claude-x","max_tokens":100,"stream":true,"tools":[{}],"messages":[{"role":"user","content":"`+prompt+`"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "calc.sh") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	e.raw("GET", "/v1/files?"+prompt, "", "")
	e.settled()
	e.relay.Close()
	mu.Lock()
	defer mu.Unlock()
	out := buf.String()
	if !strings.Contains(out, "inference call") || !strings.Contains(out, "call refused") {
		t.Fatalf("the log lacks the call records: %s", out)
	}
	for _, secret := range []string{prompt, "calc.sh", "input_json_delta", serverKey, placeholder} {
		if strings.Contains(out, secret) {
			t.Fatalf("the log carries %q:\n%s", secret, out)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestRefusalsRecordedUpToTheCap: a worker hammering the relay with calls
// to be refused cannot load the store: the first maxRecordedRefusals are
// ledger events, the last of them says it is the last, and the rest are
// refused all the same.
func TestRefusalsRecordedUpToTheCap(t *testing.T) {
	e := newEnv(t, setup{wire: config.WireResponses})
	for i := range maxRecordedRefusals + 5 {
		resp, body := e.raw("GET", "/v1/responses", "", "")
		if resp.StatusCode != 405 || errCode(t, body) != "route_refused" {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
		}
	}
	events, err := e.store.Events(context.Background(), e.relay.opts.EpisodeID)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var last map[string]any
	for _, ev := range events {
		if ev.Kind == "inference_refused" {
			n++
			last = nil
			if err := json.Unmarshal(ev.Body, &last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n != maxRecordedRefusals || last["last_recorded"] != true {
		t.Fatalf("%d refusals recorded (want %d), the last %v", n, maxRecordedRefusals, last)
	}
	if rep, err := e.store.VerifyLedger(context.Background(), e.relay.opts.EpisodeID); err != nil || !rep.OK() {
		t.Fatalf("ledger: %+v %v", rep, err)
	}
}
