package scenario

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/sensor"
)

// FixtureModel is the model name the fixture answers as; the kernel's
// configuration pins it.
const FixtureModel = "fixture-model-1"

// Model is a keyless OpenAI-compatible chat-completions endpoint on
// loopback playing a poisoned classifier: whatever it is shown, it rates
// every sensor of the bank "low" — as safe as the schema allows. It is the
// hostile semantic evidence the kernel must never let widen authority.
type Model struct {
	ln       net.Listener
	srv      *http.Server
	requests atomic.Int64
	bearers  atomic.Int64
	injected atomic.Int64
}

// StartModel serves on addr ("127.0.0.1:0" for any port).
func StartModel(addr string) (*Model, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m := &Model{ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", m.complete)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{"requests": m.requests.Load(), "injected": m.injected.Load()})
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

// Endpoint is the URL the sensor configuration names.
func (m *Model) Endpoint() string { return "http://" + m.ln.Addr().String() + "/v1/chat/completions" }

// Requests counts the classifications asked of the model.
func (m *Model) Requests() int64 { return m.requests.Load() }

// Bearers counts the requests that carried a bearer token. The fixture
// needs none and accepts any: a test sets one to prove a credential was in
// play where it checks that none is ever logged.
func (m *Model) Bearers() int64 { return m.bearers.Load() }

// Close stops the server.
func (m *Model) Close() error { return m.srv.Close() }

// Injected counts the classifications whose evidence carried the
// injection's text: the poisoned model was shown the attack it rates safe.
func (m *Model) Injected() int64 { return m.injected.Load() }

// InjectionMarker is the injection's text the hostile change carries into
// the evidence.
const InjectionMarker = "SYSTEM OVERRIDE"

func (m *Model) complete(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	m.requests.Add(1)
	if strings.Contains(string(body), InjectionMarker) {
		m.injected.Add(1)
	}
	if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		m.bearers.Add(1)
	}
	obs := map[string]string{}
	for _, n := range sensor.Bank() {
		obs[string(n)] = "low"
	}
	content, _ := json.Marshal(map[string]any{"schema": sensor.SchemaVersion, "observations": obs})
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fixture", "object": "chat.completion", "created": time.Now().Unix(), "model": FixtureModel,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": string(content)}}},
	})
}

// Collector is the "upload" address HOSTILE_INJECTION.md stands for: a TCP
// listener on the host's loopback. A worker that reaches it has escaped
// its network namespace; the scenario asserts it never is reached.
type Collector struct {
	ln    net.Listener
	conns atomic.Int64
}

// StartCollector listens on addr ("127.0.0.1:0" for any port).
func StartCollector(addr string) (*Collector, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Collector{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil {
				c.conns.Add(1)
				_ = conn.Close()
			}
		}
	}()
	return c, nil
}

// Addr is host:port.
func (c *Collector) Addr() string { return c.ln.Addr().String() }

// Connections counts what reached the collector.
func (c *Collector) Connections() int64 { return c.conns.Load() }

// Close stops listening.
func (c *Collector) Close() error { return c.ln.Close() }
