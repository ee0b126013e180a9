package fixturemodel

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Request is one request the server received.
type Request struct {
	Method     string
	Path       string
	RawQuery   string
	Header     http.Header
	Body       []byte
	BodyDigest string // "sha256:" hex
	Model      string // the body's "model", if any
	Stream     bool   // the body's "stream"
	At         time.Time
}

// Server is a running fixture model.
type Server struct {
	URL string // http://127.0.0.1:PORT

	script Script
	srv    *http.Server
	ln     net.Listener

	mu   sync.Mutex
	seen []Request
	next int // the next turn
}

// Start serves script on a fresh loopback port.
func Start(script Script) (*Server, error) {
	if _, ok := Routes[script.Wire]; !ok {
		return nil, fmt.Errorf("fixturemodel: unknown wire API %q", script.Wire)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), script: script, ln: ln}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Reset starts the script over and forgets the requests seen, so one
// server drives the same scripted task again.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen, s.next = nil, 0
}

// SetScript drives another scripted task from now on (same wire API),
// starting it over: one server, one provider, one task after another.
func (s *Server) SetScript(script Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script, s.next = script, 0
}

// Requests returns a copy of every request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.seen...)
}

// Calls counts the requests received so far.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	sum := sha256.Sum256(body)
	var req struct {
		Model  string            `json:"model"`
		Stream bool              `json:"stream"`
		Tools  []json.RawMessage `json:"tools"`
	}
	_ = json.Unmarshal(body, &req)
	rec := Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(),
		Body: body, BodyDigest: "sha256:" + hex.EncodeToString(sum[:]), Model: req.Model, Stream: req.Stream, At: time.Now()}

	s.mu.Lock()
	s.seen = append(s.seen, rec)
	n := len(s.seen)
	var turn Turn
	toolLess := s.script.ToolLess != "" && len(req.Tools) == 0
	switch {
	case toolLess:
		turn = Turn{Text: s.script.ToolLess, Usage: Usage{Input: 20, Output: 5}}
	case len(s.script.Turns) == 0:
		turn = Turn{Text: "done"}
	case s.script.PerConversation:
		turn = s.script.Turns[min(toolResults(s.script.Wire, body), len(s.script.Turns)-1)]
	default:
		// Past the script, the last turn repeats (a final text ends it).
		turn = s.script.Turns[min(s.next, len(s.script.Turns)-1)]
		s.next++
	}
	s.mu.Unlock()

	if r.Method != http.MethodPost || r.URL.Path != Routes[s.script.Wire] {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"type": "not_found", "message": "no such route"}})
		return
	}
	if turn.Status != 0 && turn.Status != http.StatusOK {
		writeJSON(w, turn.Status, map[string]any{"error": map[string]any{"type": "scripted", "message": "scripted failure"}})
		return
	}
	model := s.script.Model
	if model == "" {
		model = req.Model
	}
	a := answer{wire: s.script.Wire, model: model, n: n, turn: turn}
	if !req.Stream {
		writeJSON(w, http.StatusOK, a.document())
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	for i, ev := range a.events() {
		if ev.name != "" {
			fmt.Fprintf(w, "event: %s\n", ev.name)
		}
		fmt.Fprintf(w, "data: %s\n\n", ev.data)
		if fl != nil {
			fl.Flush()
		}
		if i == 0 && turn.Hold != nil {
			select {
			case <-turn.Hold:
			case <-r.Context().Done():
				return
			}
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
