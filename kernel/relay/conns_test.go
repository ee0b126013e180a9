package relay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/kernel/config"
)

// closedWithin reports whether the relay closes c before the deadline
// (a read returns, with nothing or an error), without sending anything.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(c)
	return err == nil // EOF: closed by the relay; a timeout is an error
}

// TestRelayConnectionsBounded: a worker cannot hold the relay's
// connections: beyond twice the calls it may have in flight a new
// connection is closed at once; a body trickled slower than the read
// timeout is cut; an idle kept-alive connection is closed. A fresh call
// is served afterwards.
func TestRelayConnectionsBounded(t *testing.T) {
	e := newEnv(t, setup{wire: config.WireResponses, maxConcurrent: 2, readTimeout: 500 * time.Millisecond, idleTime: 300 * time.Millisecond})
	// Four connections that each send half a request and stall.
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("unix", e.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/responses HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // the four accepted before the fifth
	over, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if !closedWithin(over, 10*time.Second) {
		t.Fatal("a connection beyond the cap was kept open")
	}
	// The trickled bodies are cut at the read timeout, freeing the slots.
	for i, c := range held {
		if !closedWithinOrAnswered(c, 30*time.Second) {
			t.Fatalf("held connection %d was never cut", i)
		}
	}
	// An idle kept-alive connection is closed.
	idle, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /v1/responses HTTP/1.1\r\nHost: relay\r\n\r\n")
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	idle.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("an idle kept-alive connection was not closed: %v", err)
	}
	if resp, body := e.post("/v1/responses", `{"model":"gpt-5.5","input":"hi"}`); resp.StatusCode != 200 {
		t.Fatalf("a call after the bounds: %d %s", resp.StatusCode, body)
	}
}

// closedWithinOrAnswered: the relay closed the connection, or answered
// (a timeout answer) and then closed it.
func closedWithinOrAnswered(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(c)
	return err == nil
}

// TestRelayErrorBodyNeverShowsTheKey: an upstream that reflects the
// request's headers in its error body (as some gateways do) shows the
// worker nothing of them: the relay answers with the provider's status
// and error type and a message of its own.
func TestRelayErrorBodyNeverShowsTheKey(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		for k, v := range r.Header {
			fmt.Fprintf(&b, "%s: %s; ", k, strings.Join(v, ","))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":{"type":"rate_limit_error","code":"rate_limit_exceeded","message":"you sent %s"}}`, strings.ReplaceAll(b.String(), `"`, `'`))
	}))
	defer up.Close()
	e := newEnv(t, setup{wire: config.WireResponses, upstream: up.URL})
	resp, body := e.post("/v1/responses", `{"model":"gpt-5.5","input":"hi"}`)
	if strings.Contains(string(body), serverKey) || strings.Contains(string(body), "you sent") {
		t.Fatalf("the upstream's error text reached the worker: %s", body)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "7" || errCode(t, body) != "rate_limit_exceeded" ||
		!strings.Contains(string(body), `"type":"rate_limit_error"`) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// TestRefusalRecordedWhenTheClientHangsUp: a worker that sends a forbidden
// request and hangs up at once still leaves its inference_refused event.
func TestRefusalRecordedWhenTheClientHangsUp(t *testing.T) {
	e := newEnv(t, setup{wire: config.WireResponses})
	const n = 10
	for range n {
		c, err := net.Dial("unix", e.sock)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"not-in-policy","input":"hi"}`
		fmt.Fprintf(c, "POST /v1/responses HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		c.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := e.store.Events(context.Background(), e.episode)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, ev := range events {
			if ev.Kind == "inference_refused" {
				got++
			}
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d refusals recorded", got, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRelayMemoryIsKernelWide: the relays of two episodes share the
// kernel's bound on what calls hold: while one episode's streamed call
// holds its body and tracker allowance, the other episode's call is
// refused (rate_limited, never forwarded, in its ledger's refusals)
// rather than adding to the kernel's heap; once the first ends, the
// second is served.
func TestRelayMemoryIsKernelWide(t *testing.T) {
	mem := NewMemory(maxLine + 32<<10) // one call's allowance
	hold := make(chan struct{})
	script := fixturemodel.FixCalc(config.WireChat, "/workspace")
	script.Turns[0].Hold = hold
	a := newEnv(t, setup{wire: config.WireChat, script: script, memory: mem})
	b := newEnv(t, setup{wire: config.WireChat, memory: mem})
	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://relay/v1/chat/completions", strings.NewReader(`{"model":"qwen","stream":true,"tools":[{}]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := a.client.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		first <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for mem.InUse() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if mem.InUse() == 0 {
		select {
		case err := <-first:
			t.Fatalf("the streamed call ended before the provider let it (%v): %+v", err, a.fixture.Requests())
		default:
		}
		t.Fatal("the streamed call never took its allowance")
	}
	resp, body := b.post("/v1/chat/completions", `{"model":"qwen","messages":[]}`)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "rate_limited") {
		t.Fatalf("a second episode's call while the kernel's relay memory is held: %d %s", resp.StatusCode, body)
	}
	if n := len(b.fixture.Requests()); n != 0 {
		t.Fatalf("the refused call reached the provider (%d requests)", n)
	}
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if resp, body := b.post("/v1/chat/completions", `{"model":"qwen","messages":[]}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the first call ended: %d %s", resp.StatusCode, body)
	}
	// Given back when the handler returns, just after the answer's end.
	for end := time.Now().Add(5 * time.Second); mem.InUse() != 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if mem.InUse() != 0 {
		t.Fatalf("%d bytes still held after every call ended", mem.InUse())
	}
}
