package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// TestBrokerSaturationLowersTheLevel saturates a real per-episode broker
// server (one slot, held) and drives serve's health loop one interval at a
// time into the kernel's live regulator: an interval with a
// saturation refusal drops autonomy from act to advise at once; clean
// intervals bring it back only after recover_after of them in a row, and a
// refusal in between restarts that count. Intervals are driven by the
// test, so nothing depends on how fast this host is.
func TestBrokerSaturationLowersTheLevel(t *testing.T) {
	cluster := storetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateDatabase(ctx, "health"); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, store.Config{URL: cluster.KernelConnString("health"), AdminURL: cluster.AdminConnString("health"), InstanceID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	payloads, err := broker.OpenPayloads(filepath.Join(t.TempDir(), "payloads"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{Store: st, Payloads: payloads})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reconcile(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	const recoverAfter = 3
	dir := t.TempDir()
	k, err := regulator.NewLive(regulator.Config{Start: regulator.Act, Max: regulator.Act, RecoverAfter: recoverAfter}, nil)
	if err != nil {
		t.Fatal(err)
	}

	// One episode's worker socket, one slot, bound to this process's own
	// cgroup so the slot holder passes the peer check and then waits for
	// its first byte (the idle timeout) while holding the slot.
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	cg := ""
	for _, line := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			cg = p
		}
	}
	sock := filepath.Join(dir, "ep.sock")
	ln, err := broker.Listen(sock, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	srv := &broker.Server{Broker: b, Concurrency: 1, IdleTimeout: time.Minute,
		Binding: broker.Binding{EpisodeID: uuid.New(), Cgroup: func() (string, bool) { return cg, cg != "" }}}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	defer func() { stop(); <-done }()

	h := regulator.NewHealthLoop(st, b, k, time.Second)
	level := func() regulator.Level { return k.State().Level }
	// refused dials once and reads the answer: effect_broker_saturated
	// while the slot is held.
	refused := func() protocol.Code {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		f, err := protocol.ReadFrame(c, protocol.WorkerResponseMax, time.Now().Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		r, err := protocol.DecodeWorkerResponse(f)
		if err != nil || r.Error == nil {
			t.Fatalf("answer: %+v %v", r, err)
		}
		return r.Error.Code
	}
	// hold takes the one slot: connections are accepted in order and the
	// slot is taken before the next accept, so the next dial is refused.
	hold := func() net.Conn {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	h.Observe(ctx)
	if l := level(); l != regulator.Act {
		t.Fatalf("healthy start: %v", l)
	}

	held := hold()
	before := b.Saturations()
	for range 5 {
		if c := refused(); c != protocol.CodeEffectBrokerSaturated {
			t.Fatalf("with the slot held: %s", c)
		}
	}
	if n := b.Saturations() - before; n != 5 {
		t.Fatalf("saturation count grew by %d for 5 refusals", n)
	}
	if a := testing.AllocsPerRun(100, func() { _ = b.Saturations() }); a != 0 {
		t.Fatalf("reading the count allocates %v times", a)
	}
	h.Observe(ctx)
	if st := k.State(); st.Level != regulator.Advise || st.Faults != regulator.BrokerSaturation {
		t.Fatalf("after a saturated interval: %v (%v), want advise (broker_saturation)", st.Level, st.Faults)
	}

	// Still held, but nobody refused in this interval: clean. Two clean
	// intervals, then a refusal, restart the streak.
	for range recoverAfter - 1 {
		h.Observe(ctx)
	}
	if l := level(); l != regulator.Advise {
		t.Fatalf("after %d clean intervals: %v", recoverAfter-1, l)
	}
	if c := refused(); c != protocol.CodeEffectBrokerSaturated {
		t.Fatal(c)
	}
	h.Observe(ctx)
	held.Close()
	for i := range recoverAfter {
		if l := level(); l != regulator.Advise {
			t.Fatalf("recovered after %d clean intervals, want %d", i, recoverAfter)
		}
		h.Observe(ctx)
	}
	if st := k.State(); st.Level != regulator.Act || st.Faults != 0 {
		t.Fatalf("after %d clean intervals: %v (%v), want act", recoverAfter, st.Level, st.Faults)
	}
}
