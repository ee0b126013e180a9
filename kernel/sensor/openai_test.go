package sensor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
)

func sampleFrame() *Frame {
	return &Frame{
		Intent:  "Fix the failing test in test/auth_test.exs without changing fixtures or secrets.",
		Scope:   []string{"lib/**"},
		Paths:   []string{"lib/auth.ex"},
		Diff:    []byte("--- a/lib/auth.ex\n+++ b/lib/auth.ex\n@@ -1 +1 @@\n-old\n+new\n"),
		History: []Event{{Kind: EventEdit, Detail: "lib/auth.ex"}, {Kind: EventTestPassed, Detail: "mix test"}},
		Effect:  &Effect{Kind: "git_commit", Target: "authoritative_repo", Class: authority.ClassAuthoritative},
	}
}

func TestClientHonestServer(t *testing.T) {
	srv := newModelServer(t, honest)
	c := newTestClient(t, testConfig(srv.URL))
	rd := c.Observe(context.Background(), sampleFrame())
	if rd.Cause != NotDegraded {
		t.Fatalf("degraded: %v", rd.Cause)
	}
	want := [BankSize]Level{Medium, Low, High, Low, Low}
	for i, o := range rd.Observations {
		if o.Sensor != Bank()[i] || o.Level != want[i] {
			t.Errorf("%d: %+v", i, o)
		}
		if o.Identity != (Identity{Implementation: "openai-chat", Model: pinned, Schema: SchemaVersion}) {
			t.Errorf("identity %+v", o.Identity)
		}
	}
	// The request is the strict-schema chat completion we expect.
	reqs := srv.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	var req struct {
		Model          string `json:"model"`
		Messages       []struct{ Role, Content string }
		ResponseFormat struct {
			Type       string `json:"type"`
			JSONSchema struct {
				Strict bool `json:"strict"`
			} `json:"json_schema"`
		} `json:"response_format"`
	}
	if err := json.Unmarshal(reqs[0], &req); err != nil {
		t.Fatal(err)
	}
	if req.Model != pinned || len(req.Messages) != 2 || req.ResponseFormat.Type != "json_schema" || !req.ResponseFormat.JSONSchema.Strict {
		t.Fatalf("request %+v", req)
	}
	var ev evidenceDoc
	if err := json.Unmarshal([]byte(req.Messages[1].Content), &ev); err != nil || ev.Schema != SchemaVersion || ev.Effect.Class != 3 {
		t.Fatalf("evidence %v %+v", err, ev)
	}
}

// TestClientDegrades: every failure mode of the endpoint is degradation,
// with its cause, never a benign reading.
func TestClientDegrades(t *testing.T) {
	valid := answer("low", "low", "low", "low", "low")
	envelope := func(model, content, finish string, extra string) string {
		c, _ := json.Marshal(content)
		return `{"model":"` + model + `","choices":[{"index":0,"finish_reason":"` + finish + `","message":{"role":"assistant","content":` + string(c) + extra + `}}]}`
	}
	cases := []struct {
		name  string
		reply func(http.ResponseWriter, *http.Request, []byte)
		cause Cause
	}{
		{"answers 'safe'", saysSafe, Malformed},
		{"lies about its model", liar, UnpinnedModel},
		{"model differs only in case", raw(200, envelope("Fixture-Model-1", valid, "stop", "")), UnpinnedModel},
		{"duplicate model key", raw(200, `{"model":"`+pinned+`","model":"other","choices":[]}`), Malformed},
		{"malformed JSON", raw(200, `{"model":"`+pinned+`","choices":[{`), Malformed},
		{"not JSON at all", raw(200, `<html>gateway</html>`), Malformed},
		{"server error", raw(500, `{"error":"overloaded"}`), Outage},
		{"rate limited", raw(429, `{}`), Outage},
		{"redirect is not followed", func(w http.ResponseWriter, r *http.Request, _ []byte) {
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
		}, Outage},
		{"no choices", raw(200, `{"model":"`+pinned+`","choices":[]}`), Malformed},
		{"two choices", raw(200, `{"model":"`+pinned+`","choices":[{"finish_reason":"stop","message":{"content":"{}"}},{"finish_reason":"stop","message":{"content":"{}"}}]}`), Malformed},
		{"cut off by length", raw(200, envelope(pinned, valid, "length", "")), Malformed},
		{"refusal", raw(200, envelope(pinned, valid, "stop", `,"refusal":"I cannot help"`)), Malformed},
		{"content not JSON", raw(200, envelope(pinned, "everything looks safe", "stop", "")), Malformed},
		{"answer with an extra field", raw(200, envelope(pinned, `{"schema":"autonomic.sensor.v1","observations":{"scope_drift":"low","authority_escalation":"low","evidence_sufficiency":"low","irreversibility":"low","trajectory_regime":"low"},"grant":true}`, "stop", "")), Malformed},
		{"answer missing a sensor", raw(200, envelope(pinned, `{"schema":"autonomic.sensor.v1","observations":{"scope_drift":"low","authority_escalation":"low","evidence_sufficiency":"low","irreversibility":"low"}}`, "stop", "")), Malformed},
		{"answer with an unknown sensor", raw(200, envelope(pinned, `{"schema":"autonomic.sensor.v1","observations":{"scope_drift":"low","authority_escalation":"low","evidence_sufficiency":"low","irreversibility":"low","trajectory_regime":"low","overall":"low"}}`, "stop", "")), Malformed},
		{"answer of another schema version", raw(200, envelope(pinned, strings.Replace(valid, SchemaVersion, "autonomic.sensor.v2", 1), "stop", "")), Malformed},
		{"answer with duplicate keys", raw(200, envelope(pinned, `{"schema":"autonomic.sensor.v1","observations":{"scope_drift":"high","scope_drift":"low","authority_escalation":"low","evidence_sufficiency":"low","irreversibility":"low","trajectory_regime":"low"}}`, "stop", "")), Malformed},
		{"answer with a numeric level", raw(200, envelope(pinned, strings.Replace(valid, `"low"`, `0`, 1), "stop", "")), Malformed},
		{"response too large", raw(200, `{"model":"`+pinned+`","pad":"`+strings.Repeat("x", 70<<10)+`"}`), OverBudget},
		{"slow", slow, Timeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := newModelServer(t, c.reply)
			cfg := testConfig(srv.URL)
			if c.cause == Timeout {
				cfg.Timeout = 50 * time.Millisecond
			}
			rd := newTestClient(t, cfg).Observe(context.Background(), sampleFrame())
			assertDegraded(t, rd, c.cause)
		})
	}
}

func assertDegraded(t *testing.T, rd Reading, cause Cause) {
	t.Helper()
	if rd.Cause != cause {
		t.Fatalf("cause %v, want %v", rd.Cause, cause)
	}
	for _, o := range rd.Observations {
		if o.Level != Degraded || o.Identity.Implementation != "openai-chat" || o.Identity.Schema != SchemaVersion {
			t.Fatalf("observation %+v", o)
		}
	}
	want := regulator.SemanticOutage
	if cause == UnpinnedModel {
		want = regulator.UnpinnedModel
	}
	if rd.Cause.Fault() != want {
		t.Fatalf("fault %v", rd.Cause.Fault())
	}
}

func TestClientLiarIsRecorded(t *testing.T) {
	srv := newModelServer(t, liar)
	rd := newTestClient(t, testConfig(srv.URL)).Observe(context.Background(), sampleFrame())
	if got := rd.Observations[0].Identity.Model; got != "gpt-unpinned??" {
		t.Fatalf("recorded model %q", got)
	}
}

func TestClientStoppedServer(t *testing.T) {
	srv := newModelServer(t, honest)
	c := newTestClient(t, testConfig(srv.URL))
	if rd := c.Observe(context.Background(), sampleFrame()); rd.Cause != NotDegraded {
		t.Fatalf("before stop: %v", rd.Cause)
	}
	srv.Close()
	assertDegraded(t, c.Observe(context.Background(), sampleFrame()), Outage)
}

func TestClientCallerCancels(t *testing.T) {
	srv := newModelServer(t, slow)
	c := newTestClient(t, testConfig(srv.URL))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rd := c.Observe(ctx, sampleFrame())
	if rd.Cause != Canceled || rd.Observations[0].Level != Degraded {
		t.Fatalf("%+v", rd)
	}
}

func TestClientRequestBudget(t *testing.T) {
	srv := newModelServer(t, honest)
	// A frame far larger than any budget: the evidence is bounded, and the
	// exact body sent fits the request budget.
	big := sampleFrame()
	big.Diff = []byte(strings.Repeat("+ a line of the diff\n", 50000))
	for i := 0; i < 1000; i++ {
		big.Paths = append(big.Paths, fmt.Sprintf("lib/generated/file_%d.ex", i))
		big.History = append(big.History, Event{Kind: EventCommandFailed, Detail: strings.Repeat("z ", 300)})
	}
	big.Intent = strings.Repeat("intent ", 10000)
	cfg := testConfig(srv.URL)
	cfg.EvidenceLimit, cfg.RequestLimit = 8<<10, 12<<10
	if rd := newTestClient(t, cfg).Observe(context.Background(), big); rd.Cause != NotDegraded {
		t.Fatalf("bounded request degraded: %v", rd.Cause)
	}
	reqs := srv.requests()
	if len(reqs) != 1 || len(reqs[0]) > cfg.RequestLimit {
		t.Fatalf("%d requests, body %d bytes (limit %d)", len(reqs), len(reqs[0]), cfg.RequestLimit)
	}
	// A budget the fixed part of the request cannot fit: nothing is sent.
	cfg.EvidenceLimit, cfg.RequestLimit = 1<<10, 1<<10
	rd := newTestClient(t, cfg).Observe(context.Background(), sampleFrame())
	assertDegraded(t, rd, OverBudget)
	if n := len(srv.requests()); n != 1 {
		t.Fatalf("an over-budget request was sent (%d requests)", n)
	}
}

func TestClientRedactsEvidence(t *testing.T) {
	srv := newModelServer(t, honest)
	secrets := []string{
		"sk-proj-abcdefghijklmnopqrstuvwx", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		"ghp_abcdefghijklmnopqrstuvwxyz0123456789", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "hunter2hunter2",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", "s3cr3tpassw0rd",
	}
	f := sampleFrame()
	f.Intent += " use token sk-proj-abcdefghijklmnopqrstuvwx"
	f.Diff = []byte("+aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n+aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n" +
		"+-----BEGIN PRIVATE KEY-----\n+MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n+-----END PRIVATE KEY-----\n" +
		"+DB_PASSWORD=hunter2hunter2\n+Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N\n")
	f.History = append(f.History, Event{Kind: EventCommandFailed, Detail: "git push https://bot:s3cr3tpassw0rd@example.com/r.git"})
	f.Paths = append(f.Paths, "lib/ghp_abcdefghijklmnopqrstuvwxyz0123456789.txt")
	cfg := testConfig(srv.URL)
	cfg.APIKey = "fixture-api-key-not-a-real-one"
	c := newTestClient(t, cfg)
	c.Observe(context.Background(), f)
	body := string(srv.requests()[0])
	for _, s := range secrets {
		if strings.Contains(body, s) || strings.Contains(body, strings.ReplaceAll(s, "/", `\/`)) {
			t.Errorf("secret %q reached the model", s)
		}
	}
	if !strings.Contains(body, Redacted) {
		t.Fatal("nothing was redacted")
	}
	if srv.auth[0] != "Bearer fixture-api-key-not-a-real-one" {
		t.Fatalf("authorization %q", srv.auth[0])
	}
	if s := fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg.APIKey); strings.Contains(s, "fixture-api-key") {
		t.Fatal("the API key prints")
	}
	if b, _ := json.Marshal(cfg); strings.Contains(string(b), "fixture-api-key") {
		t.Fatal("the API key marshals")
	}
}

func TestNewClientRefuses(t *testing.T) {
	ok := testConfig("http://127.0.0.1:9")
	cases := map[string]func(*ClientConfig){
		"not http":                 func(c *ClientConfig) { c.Endpoint = "file:///etc/passwd" },
		"credentials in URL":       func(c *ClientConfig) { c.Endpoint = "http://u:p@127.0.0.1/v1" },
		"no pinned models":         func(c *ClientConfig) { c.AllowedModels = nil },
		"requested model unpinned": func(c *ClientConfig) { c.Model = "other" },
		"no timeout":               func(c *ClientConfig) { c.Timeout = 0 },
		"tiny evidence":            func(c *ClientConfig) { c.EvidenceLimit = 10 },
		"request below evidence":   func(c *ClientConfig) { c.RequestLimit = c.EvidenceLimit - 1 },
		"tiny response":            func(c *ClientConfig) { c.ResponseLimit = 100 },
	}
	for name, mut := range cases {
		cfg := ok
		mut(&cfg)
		if _, err := NewClient(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
