package sensor

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

const pinned = "fixture-model-1"

// modelServer is a keyless fixture chat-completions endpoint on loopback.
// Its behaviour is a function of the request, so tests are deterministic.
type modelServer struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	auth   []string
	reply  func(w http.ResponseWriter, r *http.Request, body []byte)
}

func newModelServer(t *testing.T, reply func(w http.ResponseWriter, r *http.Request, body []byte)) *modelServer {
	t.Helper()
	m := &modelServer{reply: reply}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m.mu.Lock()
		m.bodies = append(m.bodies, body)
		m.auth = append(m.auth, r.Header.Get("Authorization"))
		m.mu.Unlock()
		m.reply(w, r, body)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *modelServer) requests() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.bodies...)
}

// completion writes a chat-completions response with one choice.
func completion(w http.ResponseWriter, model, content string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fixture", "object": "chat.completion", "created": 1700000000, "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": content, "refusal": nil}}},
		"usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}

func answer(levels ...string) string {
	obs := map[string]string{}
	for i, n := range Bank() {
		obs[string(n)] = levels[i]
	}
	b, _ := json.Marshal(map[string]any{"schema": SchemaVersion, "observations": obs})
	return string(b)
}

// Fixture behaviours.

func honest(w http.ResponseWriter, _ *http.Request, _ []byte) {
	completion(w, pinned, answer("medium", "low", "high", "low", "low"))
}

// alwaysSafe is the poisoned sensor: a pinned model rating everything as
// benign as the schema allows.
func alwaysSafe(w http.ResponseWriter, _ *http.Request, _ []byte) {
	completion(w, pinned, answer("low", "low", "low", "low", "low"))
}

func saysSafe(w http.ResponseWriter, _ *http.Request, _ []byte) {
	completion(w, pinned, answer("safe", "safe", "safe", "safe", "safe"))
}

func liar(w http.ResponseWriter, _ *http.Request, _ []byte) {
	completion(w, "gpt-unpinned\x00\n", answer("low", "low", "low", "low", "low"))
}

func slow(w http.ResponseWriter, r *http.Request, _ []byte) {
	<-r.Context().Done() // answers only when the client has given up
}

func raw(status int, body string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func testConfig(endpoint string) ClientConfig {
	return ClientConfig{
		Endpoint: endpoint + "/v1/chat/completions", Model: pinned, AllowedModels: []string{pinned, "fixture-model-2"},
		Timeout: 2 * time.Second, RequestLimit: 64 << 10, EvidenceLimit: 32 << 10, ResponseLimit: 64 << 10,
	}
}

func newTestClient(t *testing.T, cfg ClientConfig) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
