package governor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/homeostat"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/kernel/supervisor"
	"github.com/autonomic-kernel/autonomic/kernel/verify"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// The watching loops (ARCHITECTURE §6). The fast loop: the domain pushes
// the monitor's deterministic frames (violations) onto the episode's
// bounded sensor queue as critical frames, and the episode's watch child
// (Record.Watch) folds every frame into its homeostat; containment is
// reported to the episode's Contain callback, which asks for a repair. The
// slow loop runs at evaluate, inside Governor.Evaluate: the sensor bank reads
// the effect's evidence and authority.Decide weighs it with the
// deterministic signals; the verdict is recorded as a semantic decision
// bound to the effect's revision and epoch, which the commit check requires
// to allow. The regime the broker sees at prepare and commit is the
// homeostat's regime capped by the regulator's level.

// Regulator is what the governor reads of the system regulator and
// reports to it: its state, and the sensor bank's health.
type Regulator interface {
	State() regulator.State
	Report(within, faults regulator.Fault)
}

// Config configures a governor.
type Config struct {
	// Store is where the slow loop reads the durable spend and records
	// its semantic decisions.
	Store store.Store
	// Regulator, when set, caps every regime the broker sees and hears
	// the sensor bank's health (nil: autonomy is act).
	Regulator Regulator
	// Verification, when set, is automatic_verification: the broker's
	// Verifier (Governor.Evaluate, whether or not this is set) replays
	// each class 3+ git_commit in a clean one-shot domain through it.
	Verification *verify.Runner
	// Sensor, when set, is the model-backed sensor bank consulted at
	// evaluate next to the deterministic Rules (which always run). Its
	// degradation is reported to the regulator.
	Sensor sensor.SemanticSensor
	// Homeostat configures each episode's homeostat (nil: the default).
	Homeostat *homeostat.Config
	// SensorQueue is sensor_queue, each episode's bounded frame queue
	// (default 256).
	SensorQueue int
	Logger      hclog.Logger
}

// Governor runs the fast and slow loops of every episode it watches. It
// holds one trajectory Record per episode; the broker reads them through
// Trajectory, CheckLease and Evaluate, and hears of commits through Wrap.
type Governor struct {
	cfg   Config
	log   hclog.Logger
	rules *sensor.Rules
	home  homeostat.Config

	mu      sync.Mutex
	records map[uuid.UUID]*Record
}

// New returns a governor watching no episode.
func New(cfg Config) (*Governor, error) {
	if cfg.Store == nil {
		return nil, errors.New("governor: Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.SensorQueue == 0 {
		cfg.SensorQueue = 256
	}
	if _, err := sensor.NewQueue[frame](cfg.SensorQueue); err != nil {
		return nil, fmt.Errorf("episode: %w", err)
	}
	home := homeostat.DefaultConfig()
	if cfg.Homeostat != nil {
		home = *cfg.Homeostat
	}
	if err := home.Validate(); err != nil {
		return nil, fmt.Errorf("episode: homeostat: %w", err)
	}
	rules, err := sensor.NewRules()
	if err != nil {
		return nil, err
	}
	return &Governor{cfg: cfg, log: cfg.Logger, rules: rules, home: home, records: map[uuid.UUID]*Record{}}, nil
}

// Episode is what the governor knows of an episode it watches: what the
// sensors read as its purpose, and callbacks into its controller. The
// governor never drives an episode; it reports containment.
type Episode struct {
	ID uuid.UUID
	// Intent is the spec's origin intent; Scope the admitted policy's
	// allow list, the sensors' view of what the episode is for.
	Intent string
	Scope  []string
	// MaxRisk is the signed policy's semantic.max_risk (0 without an
	// admitted policy: then every reading is above it).
	MaxRisk float64
	// Epoch is the episode's current epoch; Lease its current lease.
	Epoch func() int64
	Lease func() authority.Capability
	// Contain asks for a repair of the generation of epoch.
	Contain func(epoch int64, reason string)
	// VerifyEgress, when set, gives a verification of this episode's
	// effects an egress proxy of its own (nil: none).
	VerifyEgress func() *verify.Egress
	// VerifyLayer, when set, gives a verification of this episode's
	// effects its setup layer (nil, nil: the episode has none).
	VerifyLayer func(ctx context.Context) (*verify.Layer, error)
	Logger      hclog.Logger
}

// Record is one episode's trajectory: its sensor queue, homeostat,
// history and the last slow-loop contraction.
type Record struct {
	g   *Governor
	ep  Episode
	log hclog.Logger

	commits chan Settled

	// frames is the bounded sensor queue the watch child drains into home.
	frames *sensor.Queue[frame]
	// hmu guards home, history and slow.
	hmu     sync.Mutex
	home    *homeostat.Homeostat
	history []sensor.Event
	// slow is the last slow-loop verdict's contraction (Throttle, say),
	// which holds at the commit horizon until the next evaluation.
	slow authority.Signal
}

// Open starts watching an episode: its trajectory starts empty, and until
// Close the broker reads its regime from it.
func (g *Governor) Open(ep Episode) *Record {
	if ep.Logger == nil {
		ep.Logger = g.log.With("episode", ep.ID)
	}
	r := &Record{g: g, ep: ep, log: ep.Logger, commits: make(chan Settled, 64)}
	// Both were validated by New.
	r.frames, _ = sensor.NewQueue[frame](g.cfg.SensorQueue)
	r.home, _ = homeostat.New(g.home)
	g.mu.Lock()
	g.records[ep.ID] = r
	g.mu.Unlock()
	return r
}

// Close stops watching the episode: from now on it reads as containment.
func (g *Governor) Close(id uuid.UUID) {
	g.mu.Lock()
	delete(g.records, id)
	g.mu.Unlock()
}

func (g *Governor) record(id uuid.UUID) (*Record, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.records[id]
	return r, ok
}

// Settled is an adapter's answer to one commit, as the governor heard it:
// committed, or refused or failed at the target (a commit whose outcome is
// unknown is the broker's reconcile's business, not evidence yet).
type Settled struct {
	EffectID  uuid.UUID
	Committed bool
	Code      protocol.Code // why it did not commit
}

// Commits delivers the adapters' answers to the broker's commits (any
// episode's: the receiver checks which are its own).
func (r *Record) Commits() <-chan Settled { return r.commits }

// regulatorState is the regulator's reading (act, version 0, without one).
func (g *Governor) regulatorState() regulator.State {
	if g.cfg.Regulator == nil {
		return regulator.State{Level: regulator.Act}
	}
	return g.cfg.Regulator.State()
}

// health is the sensor bank's report.
func (g *Governor) health(f regulator.Fault) {
	if g.cfg.Regulator != nil {
		g.cfg.Regulator.Report(regulator.SemanticOutage|regulator.UnpinnedModel, f)
	}
}

// frame is one entry of an episode's sensor queue.
type frame struct {
	epoch  int64 // frames of an older epoch describe a destroyed generation
	sample homeostat.Sample
	reason string
}

// historyLimit bounds the history an episode keeps for its sensors.
const historyLimit = 64

// regimeName is what the broker sees: the homeostat's regime, qualified by
// the regulator's level when that is below act.
func regimeName(r homeostat.Regime, l regulator.Level) string {
	if l == regulator.Act {
		return r.String()
	}
	return r.String() + "@" + l.String()
}

// RegimeMaxClass is broker.Config.RegimeMaxClass for a broker whose
// Trajectory is Governor.Trajectory: each regime and level names the lower
// of the two class ceilings. A broker left with its default table refuses
// every qualified name, so a forgotten table fails closed.
func RegimeMaxClass() map[string]int {
	out := map[string]int{}
	for r := homeostat.Stable; r <= homeostat.Containment; r++ {
		for l := regulator.Observe; l <= regulator.Act; l++ {
			out[regimeName(r, l)] = int(min(r.MaxClass(), l.MaxClass()))
		}
	}
	return out
}

// Trajectory is broker.Config.Trajectory: the episode's trajectory version
// and regime. An episode the governor does not watch (not started yet, or
// ended) is in containment: nothing crosses the horizon for it.
func (g *Governor) Trajectory(_ context.Context, id uuid.UUID) (int64, string) {
	r, ok := g.record(id)
	if !ok {
		return 0, homeostat.Containment.String()
	}
	return r.Trajectory()
}

// Trajectory is the episode's version and regime name. The version moves
// whenever either the homeostat's regime or the regulator's level does.
func (r *Record) Trajectory() (int64, string) {
	rs := r.g.regulatorState()
	r.hmu.Lock()
	hs := r.home.State()
	r.hmu.Unlock()
	return int64(hs.Version+rs.Version) + 1, regimeName(hs.Regime, rs.Level)
}

// Observe queues a frame for the watch child: a sample of epoch's
// generation, with the containment reason it carries. A critical frame is
// never dropped; when the queue is full of critical frames it reports so,
// and the caller contains at once.
func (r *Record) Observe(epoch int64, sample homeostat.Sample, reason string, critical bool) error {
	return r.observe(frame{epoch: epoch, sample: sample, reason: reason}, critical)
}

func (r *Record) observe(f frame, critical bool) error {
	if critical {
		return r.frames.PushCritical(f)
	}
	if !r.frames.PushSemantic(f) {
		r.log.Debug("semantic frame dropped", "dropped", r.frames.Stats().Dropped)
	}
	return nil
}

// Watch is the supervisor child between authority and the broker: it folds
// the queue's frames into the homeostat and reports containment when the
// regime reaches it. If it dies, the broker and the domain go with it.
func (r *Record) Watch(ctx context.Context, ready func()) error {
	ready()
	for {
		f, _, err := r.frames.Pop(ctx)
		if err != nil {
			return errStopped(ctx, err)
		}
		if f.epoch != r.ep.Epoch() {
			continue
		}
		f.sample.At = time.Now()
		r.hmu.Lock()
		st, err := r.home.Observe(f.sample)
		r.hmu.Unlock()
		if err != nil {
			r.log.Warn("homeostat refused a sample", "error", err)
			continue
		}
		if st.Regime == homeostat.Containment {
			why := "homeostat: " + st.Denial.String()
			if f.reason != "" {
				why = f.reason
			}
			r.ep.Contain(f.epoch, why)
		}
	}
}

// Reset starts a repaired generation's trajectory afresh: the homeostat's
// state and the old generation's events go, but the episode's repairs
// stay, so a trajectory that keeps needing repair is seen as one.
func (r *Record) Reset(reason string) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	r.home.Reset(time.Now())
	var repairs []sensor.Event
	for _, ev := range r.history {
		if ev.Kind == sensor.EventRepair {
			repairs = append(repairs, ev)
		}
	}
	r.history = append(repairs, sensor.Event{Kind: sensor.EventRepair, Detail: reason})
}

// Remember adds events to the episode's history, which the sensors read.
func (r *Record) Remember(events ...sensor.Event) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	r.history = append(r.history, events...)
	if n := len(r.history) - historyLimit; n > 0 {
		r.history = append(r.history[:0:0], r.history[n:]...)
	}
}

// Wrap returns a wraps a, reporting its commits — those that happened
// and those the target refused or failed — to every watched episode.
func (g *Governor) Wrap(a broker.Adapter) broker.Adapter { return &observed{Adapter: a, g: g} }

type observed struct {
	broker.Adapter
	g *Governor
}

func (a *observed) Commit(ctx context.Context, r broker.Request) broker.Result {
	res := a.Adapter.Commit(ctx, r)
	switch res.Outcome {
	case broker.Committed:
		a.g.settled(Settled{EffectID: r.EffectID, Committed: true})
	case broker.NotCommitted:
		a.g.settled(Settled{EffectID: r.EffectID, Code: protocol.AsWire(res.Err).Code})
	}
	return res
}

// Unwrap gives the broker the adapter itself (its optional interfaces,
// such as broker.Toucher).
func (a *observed) Unwrap() broker.Adapter { return a.Adapter }

// settled offers an adapter's answer to every watched episode; each
// checks, off the commit path, whether the effect is its own. The offer
// never blocks a commit.
func (g *Governor) settled(s Settled) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.records {
		select {
		case r.commits <- s:
		default:
			r.log.Warn("commit notification dropped; next checkpoint will cover it", "effect", s.EffectID)
		}
	}
}

func errStopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return supervisor.ErrStopped
	}
	return err
}
