package broker

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestBackpressureLoad is the backpressure_load gate: 100× effect_concurrency
// clients at once; those beyond the bound are refused at once with
// effect_broker_saturated, and goroutines and memory return to where they
// were. "At once" without a clock: the held clients keep every slot for
// the whole test (an idle timeout of a minute), so a client the broker
// queued instead of refusing would get no answer before its own read
// deadline, and fail.
func TestBackpressureLoad(t *testing.T) {
	const concurrency = 8
	e, _ := artifactEnv(t)
	e.serveWith(concurrency, func(s *Server) { s.IdleTimeout = time.Minute })
	status := frame([]byte(`{"protocol":1,"request_id":"r","epoch":1,"action":"status","effect_id":"` + tUUIDb + `"}`))

	measure := func() (int, uint64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	// Warm up pools and the store's connections.
	for range 20 {
		rawCall(t, e.socket, status)
	}
	time.Sleep(100 * time.Millisecond)
	g0, h0 := measure()

	// Hold every slot with clients that connect and send nothing yet.
	var held []net.Conn
	for range concurrency {
		c, err := net.Dial("unix", e.socket)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(50 * time.Millisecond)
	const clients = 100 * concurrency
	var wg sync.WaitGroup
	codes := make([]protocol.Code, clients)
	lat := make([]time.Duration, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			c, err := net.Dial("unix", e.socket)
			if err != nil {
				codes[i] = "dial:" + protocol.Code(err.Error())
				return
			}
			defer c.Close()
			_, _ = c.Write(status)
			b, err := protocol.ReadFrame(c, protocol.WorkerResponseMax, time.Now().Add(10*time.Second))
			lat[i] = time.Since(start)
			if err != nil {
				codes[i] = "read"
				return
			}
			r, err := protocol.DecodeWorkerResponse(b)
			if err != nil || r.OK {
				codes[i] = "bad"
				return
			}
			codes[i] = r.Error.Code
		}()
	}
	wg.Wait()
	var worst time.Duration
	for i, c := range codes {
		if c != protocol.CodeEffectBrokerSaturated {
			t.Fatalf("client %d: %s, want effect_broker_saturated", i, c)
		}
		worst = max(worst, lat[i])
	}
	// The held clients are still served when they speak.
	for _, c := range held {
		_, _ = c.Write(status)
		b, err := protocol.ReadFrame(c, protocol.WorkerResponseMax, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := protocol.DecodeWorkerResponse(b); r == nil || r.OK || r.Error.Code != protocol.CodeNotFound {
			t.Fatalf("held client: %+v", r)
		}
		c.Close()
	}
	// Everything returns to the baseline.
	deadline := time.Now().Add(5 * time.Second)
	for {
		g1, h1 := measure()
		if g1 <= g0+2 && h1 < h0+8<<20 {
			t.Logf("goroutines %d → %d, heap %d KiB → %d KiB, worst refusal %v", g0, g1, h0>>10, h1>>10, worst)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not flat: goroutines %d → %d, heap %d → %d", g0, g1, h0, h1)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
