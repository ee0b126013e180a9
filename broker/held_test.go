package broker

import (
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/broker/client"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// heldConn is a raw connection to the broker socket, spoken to frame by
// frame.
type heldConn struct {
	t *testing.T
	c net.Conn
}

func dialHeld(t *testing.T, socket string) *heldConn {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &heldConn{t: t, c: c}
}

func (h *heldConn) send(b []byte) {
	h.t.Helper()
	if _, err := h.c.Write(b); err != nil {
		h.t.Fatal(err)
	}
}

// recv reads one answer; nil, err when there is none.
func (h *heldConn) recv(wait time.Duration) (*protocol.WorkerResponse, error) {
	b, err := protocol.ReadFrame(h.c, protocol.WorkerResponseMax, time.Now().Add(wait))
	if err != nil {
		return nil, err
	}
	return protocol.DecodeWorkerResponse(b)
}

// closed asserts that the broker ended the connection within wait,
// without another answer.
func (h *heldConn) closed(wait time.Duration) {
	h.t.Helper()
	if r, err := h.recv(wait); !protocol.IsEOF(err) {
		h.t.Fatalf("connection not closed by the broker: %+v %v", r, err)
	}
}

func statusFrame(id string, epoch int64) []byte {
	return frame([]byte(`{"protocol":1,"request_id":"` + id + `","epoch":` + strconv.FormatInt(epoch, 10) +
		`,"action":"status","effect_id":"` + tUUIDb + `"}`))
}

// served asserts a status of an unknown effect answered as such: the
// request was read and handled, not refused at the door.
func served(t *testing.T, r *protocol.WorkerResponse, err error, id string) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if r.RequestID != id || r.OK || r.Error.Code != protocol.CodeNotFound {
		t.Fatalf("answer %+v (error %+v), want not_found to %s", r, r.Error, id)
	}
}

// TestHeldConnection: a connection carries requests one after another
// (protocol/README.md §11.1), each under the bounds of the first, and stays
// bound to the generation it was accepted from.
func TestHeldConnection(t *testing.T) {
	e, _ := artifactEnv(t)
	// The hook counts peer checks. It is set before the server starts and
	// cleared after it has stopped (cleanups run last first), so no
	// connection's goroutine sees it change.
	var checks atomic.Int32
	peerHook = func(step string, _ int) {
		if step == "cgroup" {
			checks.Add(1)
		}
	}
	t.Cleanup(func() { peerHook = nil })
	e.serveWith(4, func(s *Server) { s.WriteTimeout = 300 * time.Millisecond })
	epoch := e.epoch()

	t.Run("requests answered in order, peer checked once", func(t *testing.T) {
		checks0 := checks.Load()
		ctx := ctxT(t)
		c, err := client.Dial(ctx, e.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		prep := prepareReq(e, "artifact", "releases", map[string]string{"name": "held.tar"}, []byte("held"))
		prep.Protocol, prep.RequestID = protocol.WorkerVersion, "held-prepare"
		r, err := c.Call(ctx, prep)
		if err != nil || r.RequestID != "held-prepare" {
			t.Fatal(err, r)
		}
		p := mustOK(t, r)
		for i := range 5 {
			id := "held-" + strconv.Itoa(i)
			var req *protocol.WorkerRequest
			if i%2 == 0 {
				req = byEffectReq(e, protocol.WorkerStatus, p)
			} else {
				// A refusal answers the request, not the connection.
				req = &protocol.WorkerRequest{Action: protocol.WorkerStatus, Epoch: epoch, EffectID: tUUIDb}
			}
			req.Protocol, req.RequestID = protocol.WorkerVersion, id
			r, err := c.Call(ctx, req)
			if err != nil || r.RequestID != id {
				t.Fatalf("call %d: %v %+v", i, err, r)
			}
			if i%2 == 0 && (!r.OK || r.Result.ID != p.ID || r.Result.State != "prepared") {
				t.Fatalf("call %d: %+v", i, r)
			}
			if i%2 == 1 {
				wantErr(t, r, protocol.CodeNotFound)
			}
		}
		ev := byEffectReq(e, protocol.WorkerEvaluate, p)
		ev.Protocol, ev.RequestID = protocol.WorkerVersion, "held-evaluate"
		if r, err := c.Call(ctx, ev); err != nil || mustOK(t, r).State != "evaluating" {
			t.Fatal(err, r)
		}
		if n := checks.Load() - checks0; n != 1 {
			t.Fatalf("%d peer checks for one connection", n)
		}
	})

	t.Run("rebinding cuts off a held connection", func(t *testing.T) {
		self := e.cgroup.Load().(string)
		defer e.cgroup.Store(self)
		h := dialHeld(t, e.socket)
		h.send(statusFrame("a", epoch))
		r, err := h.recv(5 * time.Second)
		served(t, r, err, "a")
		// A repair binds the next generation: the peer, checked against
		// the old one at accept, is refused on its next request and cut
		// off.
		e.cgroup.Store(self + "/next-generation")
		h.send(statusFrame("b", epoch))
		r, err = h.recv(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wantErr(t, r, protocol.CodePeerRefused)
		h.closed(e.server.IdleTimeout / 2)
		// No generation bound: refused at once, without waiting for one.
		e.cgroup.Store(self)
		h = dialHeld(t, e.socket)
		h.send(statusFrame("c", epoch))
		r, err = h.recv(5 * time.Second)
		served(t, r, err, "c")
		e.cgroup.Store("")
		began := time.Now()
		h.send(statusFrame("d", epoch))
		r, err = h.recv(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wantErr(t, r, protocol.CodePeerRefused)
		if waited := time.Since(began); waited >= e.server.BindWait {
			t.Errorf("refused after %v: it waited for a binding", waited)
		}
		h.closed(e.server.IdleTimeout / 2)
	})

	t.Run("idle held connection closed at IdleTimeout", func(t *testing.T) {
		h := dialHeld(t, e.socket)
		h.send(statusFrame("a", epoch))
		r, err := h.recv(5 * time.Second)
		served(t, r, err, "a")
		began := time.Now()
		h.closed(5 * time.Second)
		if d := time.Since(began); d < e.server.IdleTimeout*9/10 || d > e.server.IdleTimeout+2*time.Second {
			t.Fatalf("closed after %v, idle timeout %v", d, e.server.IdleTimeout)
		}
	})

	t.Run("bad later frame answered and closed", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			in   []byte
			want protocol.Code
		}{
			{"garbage", frame([]byte("not json")), protocol.CodeMalformedJSON},
			{"oversized", []byte{0x7f, 0xff, 0xff, 0xff}, protocol.CodeFrameTooLarge},
			{"unknown field", frame([]byte(`{"protocol":1,"request_id":"x","epoch":1,"action":"status","effect_id":"` + tUUIDb + `","path":"/etc"}`)), protocol.CodeUnknownField},
			{"empty frame", []byte{0, 0, 0, 0}, protocol.CodeMalformedJSON},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := dialHeld(t, e.socket)
				h.send(statusFrame("a", epoch))
				r, err := h.recv(5 * time.Second)
				served(t, r, err, "a")
				h.send(tc.in)
				if r, err = h.recv(5 * time.Second); err != nil {
					t.Fatal(err)
				}
				if r.OK || r.Error.Code != tc.want || r.RequestID != "" {
					t.Fatalf("got %+v %+v, want %s", r, r.Error, tc.want)
				}
				h.closed(e.server.IdleTimeout / 2)
			})
		}
	})

	t.Run("pipelining without reading is cut off by the write deadline", func(t *testing.T) {
		goroutines := func() int { runtime.GC(); return runtime.NumGoroutine() }
		g0 := goroutines()
		h := dialHeld(t, e.socket)
		status := statusFrame("p", epoch)
		var sent atomic.Int64
		done := make(chan error, 1)
		go func() {
			// Never read: every answer waits in the socket until the
			// broker's write blocks.
			for {
				if _, err := h.c.Write(status); err != nil {
					done <- err
					return
				}
				sent.Add(1)
			}
		}()
		select {
		case err := <-done:
			t.Logf("broker closed the connection after %d pipelined requests: %v", sent.Load(), err)
		case <-time.After(10 * time.Second):
			h.c.Close()
			<-done
			t.Fatalf("still accepting frames after 10 s (%d sent): the broker keeps answering a peer that never reads", sent.Load())
		}
		h.c.Close()
		// Its goroutine and slot are released: a new connection is served.
		deadline := time.Now().Add(5 * time.Second)
		for goroutines() > g0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if g := goroutines(); g > g0 {
			t.Errorf("goroutines %d → %d", g0, g)
		}
		wantErr(t, rawCall(t, e.socket, statusFrame("q", epoch)), protocol.CodeNotFound)
	})

	t.Run("nothing grows per request", func(t *testing.T) {
		ctx := ctxT(t)
		c, err := client.Dial(ctx, e.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req := &protocol.WorkerRequest{Protocol: 1, RequestID: "g", Epoch: epoch, Action: protocol.WorkerStatus, EffectID: tUUIDb}
		call := func(n int) {
			for range n {
				if r, err := c.Call(ctx, req); err != nil || r.OK {
					t.Fatal(err, r)
				}
			}
		}
		heap := func() uint64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		call(200)
		h0 := heap()
		call(3000)
		if h1 := heap(); h1 > h0+1<<20 {
			t.Fatalf("heap %d KiB → %d KiB over 3000 requests on one connection", h0>>10, h1>>10)
		} else {
			t.Logf("heap %d KiB → %d KiB over 3000 requests on one connection", h0>>10, h1>>10)
		}
	})
}

// TestHeldConnectionsAndSaturation: held connections keep their slots; a
// new connection beyond effect_concurrency is refused at once as before,
// and served once a held one is closed.
func TestHeldConnectionsAndSaturation(t *testing.T) {
	e, _ := artifactEnv(t)
	e.serve(2)
	epoch := e.epoch()
	var held []*heldConn
	for i := range 2 {
		h := dialHeld(t, e.socket)
		id := "h" + strconv.Itoa(i)
		h.send(statusFrame(id, epoch))
		r, err := h.recv(5 * time.Second)
		served(t, r, err, id)
		held = append(held, h)
	}
	began := time.Now()
	wantErr(t, rawCall(t, e.socket, statusFrame("x", epoch)), protocol.CodeEffectBrokerSaturated)
	if d := time.Since(began); d > e.server.IdleTimeout/2 {
		t.Fatalf("refusal took %v: queued behind a held connection", d)
	}
	// The held connections are still served.
	for i, h := range held {
		id := "again" + strconv.Itoa(i)
		h.send(statusFrame(id, epoch))
		r, err := h.recv(5 * time.Second)
		served(t, r, err, id)
	}
	held[0].c.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		r := rawCall(t, e.socket, statusFrame("y", epoch))
		if !r.OK && r.Error.Code == protocol.CodeNotFound {
			break
		}
		if r.OK || r.Error.Code != protocol.CodeEffectBrokerSaturated || time.Now().After(deadline) {
			t.Fatalf("after a held connection closed: %+v", r.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
