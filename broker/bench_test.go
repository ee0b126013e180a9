package broker

import (
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/broker/client"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// walkSplit is the wall-clock split of walks: the three requests, and the
// commit's steps between the broker's hooks — to commit_intent (the
// ownership read, the payload read and verified, touches, the checks and
// commit_intent), committing (durable), the adapter, and the outcome
// recorded (durable).
type walkSplit [7][]time.Duration

var walkSplitUnits = [7]string{"prepare-p50-µs", "evaluate-p50-µs", "commit-p50-µs",
	"c.intent-p50-µs", "c.committing-p50-µs", "c.adapter-p50-µs", "c.outcome-p50-µs"}

func (w *walkSplit) add(ds ...time.Duration) {
	for i, d := range ds {
		w[i] = append(w[i], d)
	}
}

func (w *walkSplit) report(b *testing.B) {
	for i, ds := range w {
		if len(ds) > 0 {
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), walkSplitUnits[i])
		}
	}
}

func reportQuantiles(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	if len(ds) == 0 {
		return
	}
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkBroker runs, side by side: a status round trip over the socket
// (target p50 ≤ 200 µs) and its database read alone, a full prepare → evaluate → commit of an artifact
// (approval signature excluded from the timing), the reference it is held
// to (two fsync'd store transactions plus the artifact adapter's own
// commit, with its fsyncs, of an artifact of the same size; target ≤ 2×
// the reference), and the bare store floor (the two transactions alone).
// The walk also reports its wall-clock split (walkSplit), so that a cut
// shows where it landed.
func BenchmarkBroker(b *testing.B) {
	pub := b.TempDir()
	// The commit's marks, by the broker's hooks (see walkSplit).
	var marks [3]time.Time
	e := newEnv(b, func(e *env, cfg *Config) {
		cfg.Adapters = append(cfg.Adapters, &Artifact{Targets: map[string]ArtifactTarget{"releases": {Dir: pub}}})
		// The benchmark measures the horizon, not the prepare quota.
		cfg.Quota = Quota{PreparesPerEpisode: 1 << 40, PreparesPerMinute: 1 << 30}
		cfg.Hooks = &Hooks{AfterIntent: func(store.Effect) { marks[0] = time.Now() },
			BeforeAdapter: func(store.Effect) { marks[1] = time.Now() },
			AfterAdapter:  func(store.Effect, Result) { marks[2] = time.Now() }}
	})
	e.serve(8)
	p := mustOK(b, e.do(prepareReq(e, "artifact", "releases", map[string]string{"name": "status-probe"}, []byte("x"))))
	// Every walk and every reference publishes a body of its own, as a
	// worker's effects do: a body the payload store already holds skips
	// its write and both fsyncs, which would flatter prepare.
	body := func(n int) []byte { return []byte("artifact body " + strconv.Itoa(n)) }

	status := &protocol.WorkerRequest{Protocol: 1, RequestID: "s", Epoch: e.epoch(), Action: protocol.WorkerStatus, EffectID: p.ID}
	// roundTrips times call b.N times and reports p50, p99 and the
	// process's CPU (worker and broker sides, not PostgreSQL's) per call:
	// on a loaded host the latency is mostly waiting for a core, and this
	// is what a call asks of one.
	roundTrips := func(b *testing.B, call func() (*protocol.WorkerResponse, error)) {
		ds := make([]time.Duration, 0, b.N)
		cpu0 := cpuTime()
		for b.Loop() {
			start := time.Now()
			r, err := call()
			ds = append(ds, time.Since(start))
			if err != nil || !r.OK {
				b.Fatal(err, r)
			}
		}
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(len(ds)), "cpu-µs/op")
		reportQuantiles(b, ds)
	}
	// A round trip on a held connection (client.Conn): the worker pays
	// the connect and the peer check once, then a request and its answer
	// per call.
	b.Run("status_round_trip", func(b *testing.B) {
		ctx := ctxT(b)
		c, err := client.Dial(ctx, e.socket)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		roundTrips(b, func() (*protocol.WorkerResponse, error) { return c.Call(ctx, status) })
	})
	// The same on a connection of its own per call (client.Call): socket,
	// connect, accept, the peer check and the close on top.
	b.Run("status_connect_round_trip", func(b *testing.B) {
		ctx := ctxT(b)
		roundTrips(b, func() (*protocol.WorkerResponse, error) { return client.Call(ctx, e.socket, status) })
	})
	// The status's one database round trip alone (the ownership read),
	// so that the rest of the round trips (frames, scheduling, and for
	// the connect one the socket and the peer check) can be told from it.
	b.Run("status_store_read", func(b *testing.B) {
		id := uuid.MustParse(p.ID)
		ds := make([]time.Duration, 0, b.N)
		ctx := ctxT(b)
		for b.Loop() {
			start := time.Now()
			if _, _, err := e.store.EffectInEpisode(ctx, e.ep.ID, id); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		reportQuantiles(b, ds)
	})
	// walk is one artifact's prepare → evaluate → commit through the
	// broker. The requests are built outside the timing: building one
	// reads the epoch from the store (a worker knows its epoch), and the
	// approval is a store read and a signature; those are the harness's,
	// not the broker's.
	seq := 0
	var split walkSplit
	walk := func(b *testing.B) time.Duration {
		seq++
		prep := prepareReq(e, "artifact", "releases", map[string]string{"name": "a" + strconv.Itoa(seq)}, body(seq))
		start := time.Now()
		pr := mustOK(b, e.do(prep))
		prepared := time.Since(start)
		ap := e.approve(pr.ID)
		req := byEffectReq(e, protocol.WorkerEvaluate, pr)
		req.Approval = ap
		commit := byEffectReq(e, protocol.WorkerCommit, pr)
		t0 := time.Now()
		mustOK(b, e.do(req))
		t1 := time.Now()
		if c := mustOK(b, e.do(commit)); c.State != "committed" {
			b.Fatal(c.State)
		}
		end := time.Now()
		split.add(prepared, t1.Sub(t0), end.Sub(t1), marks[0].Sub(t1), marks[1].Sub(marks[0]), marks[2].Sub(marks[1]), end.Sub(marks[2]))
		return prepared + end.Sub(t0)
	}
	// reference is what the horizon cannot do without, the ≤ 2× goal's
	// unit: the durable intent and the durable outcome (two fsync'd
	// transactions on the same store) and the adapter publishing the
	// artifact (its write, file fsync and three directory fsyncs).
	art := &Artifact{Targets: map[string]ArtifactTarget{"releases": {Dir: pub}}}
	reference := func(b *testing.B) time.Duration {
		seq++
		ctx := ctxT(b)
		payload := body(seq)
		r := Request{EffectID: uuid.New(), Revision: 1, TargetID: "releases", Target: []byte(`{"name":"ref` + strconv.Itoa(seq) + `"}`),
			Payload: payload, PayloadDigest: Digest(payload)}
		start := time.Now()
		if _, err := e.store.AcquireOwnership(ctx, e.ep.ID); err != nil {
			b.Fatal(err)
		}
		if res := art.Commit(ctx, r); res.Outcome != Committed {
			b.Fatal(res.Err)
		}
		if _, err := e.store.AcquireOwnership(ctx, e.ep.ID); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	b.Run("artifact_prepare_evaluate_commit", func(b *testing.B) {
		ds := make([]time.Duration, 0, b.N)
		split = walkSplit{}
		for b.Loop() {
			ds = append(ds, walk(b))
		}
		reportQuantiles(b, ds)
		split.report(b)
	})
	b.Run("reference_two_transactions_and_adapter", func(b *testing.B) {
		ds := make([]time.Duration, 0, b.N)
		for b.Loop() {
			ds = append(ds, reference(b))
		}
		reportQuantiles(b, ds)
	})
	// The two alternated, one of each per iteration, so that a loaded,
	// shared host weighs on both alike: the ratio of their medians is the
	// figure the goal is judged by.
	b.Run("artifact_over_reference_interleaved", func(b *testing.B) {
		ws, rs := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
		for b.Loop() {
			ws = append(ws, walk(b))
			rs = append(rs, reference(b))
		}
		slices.Sort(ws)
		slices.Sort(rs)
		w, r := ws[len(ws)/2], rs[len(rs)/2]
		b.ReportMetric(float64(w.Microseconds()), "artifact-p50-µs")
		b.ReportMetric(float64(r.Microseconds()), "reference-p50-µs")
		b.ReportMetric(float64(w)/float64(r), "ratio-p50")
	})
	b.Run("store_floor_two_transactions", func(b *testing.B) {
		ds := make([]time.Duration, 0, b.N)
		ctx := ctxT(b)
		for b.Loop() {
			start := time.Now()
			for range 2 {
				if _, err := e.store.AcquireOwnership(ctx, e.ep.ID); err != nil {
					b.Fatal(err)
				}
			}
			ds = append(ds, time.Since(start))
		}
		reportQuantiles(b, ds)
	})
}
