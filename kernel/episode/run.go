package episode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/egress"
	"github.com/autonomic-kernel/autonomic/kernel/governor"
	"github.com/autonomic-kernel/autonomic/kernel/homeostat"
	"github.com/autonomic-kernel/autonomic/kernel/lockfile"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/kernel/supervisor"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// Episode is one running episode. Its exported methods are safe for
// concurrent use; the domain child of its supervisor is the only goroutine
// that changes its generation.
type Episode struct {
	k    *Controller
	id   uuid.UUID
	spec Spec
	// scope is the admitted policy's allow list, the sensors' view of
	// what the episode is for.
	scope []string
	// maxRisk is the signed policy's semantic.max_risk (0 without an
	// admitted policy: then every reading is above it).
	maxRisk float64
	// pol is the admitted policy (nil when it no longer verifies): its
	// inference and egress sections drive the relay and the proxy.
	pol *policy.Policy
	log hclog.Logger
	// ca terminates the egress proxies' tunnels (nil without egress): one
	// per episode, so each domain it starts, worker or verification,
	// trusts the same certificate; its key stays in this process.
	ca *egress.CA
	// lock is what the base commit's lockfiles pin, read when the signed
	// policy binds egress to them (egress.lockfile "bound").
	lock *lockfile.Set

	mu        sync.Mutex
	state     State
	why       string
	epoch     int64
	lease     store.Lease
	leaseCap  authority.Capability
	domainID  uuid.UUID
	gen       int
	repairs   int
	workspace bool
	ending    bool // End is stopping the supervisor: do not suspend
	closing   bool // its end is being recorded, or is: Drain waits for it (recordEnd)
	parked    bool // its domain is frozen while an Action waits (park.go)
	ln        *net.UnixListener
	lns       []*net.UnixListener // the relay's and the egress proxy's
	// digests are the checkpoints this controller took, as the launcher
	// reported them: a repair refuses a store record that disagrees.
	digests map[uuid.UUID]string
	// taken are the archives this controller had the launcher store for
	// the episode, each held by the launcher domain that took it until
	// releaseCheckpoints gives it back.
	taken []heldCheckpoint
	// base is closed once generation 1's pristine base checkpoint, taken
	// beside the worker, is recorded (baseErr nil) or failed; nil when the
	// episode did not start from the base (awaitBase).
	base    chan struct{}
	baseErr error
	// layer is the setup layer (digest, hex) the episode started from; ""
	// without setup, or before it is known here (verifyLayer finds it).
	layer string
	stop  context.CancelFunc
	done  chan struct{}
	exit  *supervisor.Exit
	// started is when the episode was created: its wall time counts from
	// there, across repairs and kernel restarts.
	started time.Time
	// outcome is how the episode ended by itself (harvest or wall time).
	outcome *Outcome

	// cgroup is the current generation's cgroup, or nil while none runs:
	// the broker consults it on every accept.
	cgroup atomic.Pointer[string]

	contain chan containment
	exits   chan WorkerExit

	// traj is the episode's trajectory record in the governor, which runs
	// its fast and slow loops and reports containment to containAt.
	traj *governor.Record
}

// WorkerExit is a worker's end in one generation.
type WorkerExit struct {
	Generation int
	Epoch      int64
	Exited     *protocol.Exited
	Output     []byte
}

// ID is the episode's id.
func (e *Episode) ID() uuid.UUID { return e.id }

// Status is a consistent view of the controller's state.
type Status struct {
	State      State
	Why        string
	Epoch      int64
	LeaseID    uuid.UUID
	Lease      authority.Capability
	DomainID   uuid.UUID
	Generation int
	LauncherID string
	Repairs    int
	// UnsafeLocal: the episode's domain isolates nothing (the backend is
	// unsafe_local, or another unisolated one).
	UnsafeLocal bool
	// Outcome is how the episode ended by itself, once it has (nil
	// otherwise); the store records it as the episode_ended reason.
	Outcome *Outcome
	// Parked: its domain is frozen while an Action waits on a human.
	Parked bool
}

// Status returns the current state.
func (e *Episode) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Status{State: e.state, Why: e.why, Epoch: e.epoch, LeaseID: e.lease.ID, Lease: e.leaseCap, DomainID: e.domainID,
		Generation: e.gen, LauncherID: e.k.launcherID(e.id, e.gen), Repairs: e.repairs, UnsafeLocal: !e.k.feat.Isolated,
		Outcome: e.outcome, Parked: e.parked}
}

// WorkerExits delivers each generation's worker exit.
func (e *Episode) WorkerExits() <-chan WorkerExit { return e.exits }

// Done is closed when the episode's supervisor has stopped.
func (e *Episode) Done() <-chan struct{} { return e.done }

// Exit is why the supervisor stopped (nil while it runs).
func (e *Episode) Exit() *supervisor.Exit {
	select {
	case <-e.done:
		return e.exit
	default:
		return nil
	}
}

// containment is a request to repair the generation of one epoch. It is
// bound to that epoch: a hostile worker trips many frames before its
// repair fences it, and those must not spend the next epoch's repairs.
type containment struct {
	epoch  int64
	reason string
}

// Contain asks for a repair of the current epoch now (an operator).
func (e *Episode) Contain(reason string) {
	e.mu.Lock()
	epoch := e.epoch
	e.mu.Unlock()
	e.containAt(epoch, reason)
}

// containAt asks for a repair of epoch. One request is pending at most:
// of two, the newer epoch's stays (an older one would be ignored anyway).
func (e *Episode) containAt(epoch int64, reason string) {
	c := containment{epoch: epoch, reason: reason}
	select {
	case e.contain <- c:
		return
	default:
	}
	select {
	case old := <-e.contain:
		if old.epoch >= c.epoch {
			c = old
		}
	default:
	}
	select {
	case e.contain <- c:
	default: // another request arrived meanwhile; it is as recent
	}
}

// currentEpoch and currentLease are what the governor reads of the episode.
func (e *Episode) currentEpoch() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.epoch
}

func (e *Episode) currentLease() authority.Capability {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leaseCap
}

// move changes the episode's state through the transition table.
func (e *Episode) move(to State) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.moveLocked(to, "")
}

// moveLocked is move with e.mu held, and why (when not empty) recorded
// with the new state. It is the only place e.state is written: every
// change is one the table in state.go allows.
func (e *Episode) moveLocked(to State, why string) error {
	if err := transition(e.state, to); err != nil {
		return err
	}
	e.state = to
	if why != "" {
		e.why = why
	}
	return nil
}

// grant mints and records the generation's lease under the current epoch.
func (e *Episode) grant(ctx context.Context, c authority.Capability) error {
	doc, err := encodeLease(c)
	if err != nil {
		return err
	}
	ttl := e.spec.LeaseTTL
	if ttl == 0 {
		ttl = time.Hour
	}
	l, err := e.k.cfg.Store.GrantLease(ctx, store.LeaseGrant{EpisodeID: e.id, Epoch: e.epoch, Capabilities: doc, TTL: ttl})
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.lease, e.leaseCap = l, c
	e.mu.Unlock()
	return nil
}

// run binds the socket and starts the supervisor; it returns once the
// first generation (restored from checkpoint, if named) runs.
func (e *Episode) run(ctx context.Context, checkpoint string) error {
	ln, err := broker.Listen(e.k.socketPath(e.id), e.k.cfg.OwnerUID, e.k.cfg.OwnerGID)
	if err != nil {
		return fmt.Errorf("episode: broker socket: %w", err)
	}
	e.ln = ln
	if e.wantsEgress() && e.ca == nil {
		if e.ca, err = egress.NewCA(); err != nil {
			e.closeServices()
			return fmt.Errorf("episode: egress CA: %w", err)
		}
	}
	if e.wantsEgress() && e.pol.Egress.Lockfile == policy.LockfileBound && e.lock == nil {
		// Read from the trusted repository at the base, never from the
		// workspace the worker writes.
		if e.lock, err = lockfile.Read(ctx, e.spec.Repo, e.spec.BaseOID); err != nil {
			e.closeServices()
			return protocol.Errorf(protocol.CodeInvalidField, "egress.lockfile is bound, and the base's lockfiles do not read: %v", err)
		}
	}
	services, err := e.services()
	if err != nil {
		e.closeServices()
		return err
	}
	srv := &broker.Server{Broker: e.k.cfg.Broker, Concurrency: e.k.cfg.EffectConcurrency, Binding: broker.Binding{EpisodeID: e.id, Cgroup: func() (string, bool) {
		if p := e.cgroup.Load(); p != nil {
			return *p, true
		}
		return "", false
	}, KernelOnly: e.spec.kernelOnly()}}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.stop, e.done = stop, make(chan struct{})
	started := make(chan error, 1)
	go func() {
		defer close(e.done)
		children := []supervisor.Child{
			{Name: "authority", Run: e.authority},
			{Name: "watch", Run: e.traj.Watch},
			{Name: "broker", Run: func(ctx context.Context, ready func()) error {
				ready()
				return srv.Serve(ctx, ln)
			}},
		}
		children = append(children, services...)
		children = append(children, supervisor.Child{Name: "domain", Run: func(ctx context.Context, ready func()) error {
			return e.domain(ctx, checkpoint, ready, started)
		}})
		e.exit = supervisor.RestForOne(sctx, children...)
		e.settle()
	}()
	select {
	case err := <-started:
		if err != nil {
			stop()
			<-e.done
		}
		return err
	case <-e.done:
		if e.exit != nil && e.exit.Err != nil {
			return e.exit
		}
		return errors.New("episode: supervisor ended before the domain started")
	}
}

// authority holds the episode's ownership and watches its record: the
// store unreachable, the ownership lost or the episode ended elsewhere all
// end this child, and with it the broker and the domain.
func (e *Episode) authority(ctx context.Context, ready func()) error {
	st := e.k.cfg.Store
	check := func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := st.AcquireOwnership(cctx, e.id); err != nil {
			return err
		}
		rec, err := st.Episode(cctx, e.id)
		if err != nil {
			return err
		}
		if rec.State != store.EpisodeActive {
			return fmt.Errorf("episode is %s in the store", rec.State)
		}
		return nil
	}
	if err := check(); err != nil {
		return err
	}
	ready()
	t := time.NewTicker(e.k.cfg.AuthorityInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return supervisor.ErrStopped
		case <-t.C:
			if err := check(); err != nil {
				if ctx.Err() != nil {
					return supervisor.ErrStopped
				}
				return err
			}
		}
	}
}

// env is the worker's environment for the current generation.
func (e *Episode) env() map[string]string {
	env := map[string]string{}
	for k, v := range e.spec.Env {
		env[k] = v
	}
	e.mu.Lock()
	env[envEpoch] = strconv.FormatInt(e.epoch, 10)
	env[envLease] = e.lease.ID.String()
	e.mu.Unlock()
	return env
}

// create starts the current generation's domain, restored from a
// checkpoint digest (hex) when one is given.
func (e *Episode) create(ctx context.Context, checkpoint string) (*domain.Running, error) {
	e.mu.Lock()
	gen := e.gen
	e.mu.Unlock()
	id := e.k.launcherID(e.id, gen)
	prog, _ := e.k.seccompFor(e.spec.Seccomp) // checked at start (mint)
	relayID, egressID := e.socketIDs()
	r, err := e.k.cfg.Domains.Create(ctx, domain.Spec{ID: id, Generation: gen, WorkspaceID: e.id.String(), Checkpoint: checkpoint,
		BrokerSocket: e.id.String(), RelaySocket: relayID, EgressSocket: egressID, Rootfs: e.spec.Rootfs, Argv: e.argv(),
		Env: e.env(), Cwd: e.spec.Cwd, Limits: e.spec.Limits, Seccomp: prog})
	if err != nil {
		return nil, err
	}
	if checkpoint != "" && r.Started.Restored != checkpoint {
		r.Close()
		e.destroy(ctx, id)
		return nil, fmt.Errorf("episode: launcher restored %q, want the verified checkpoint", r.Started.Restored)
	}
	cg := e.k.cfg.CgroupParent + "/" + id
	if !e.k.feat.Isolated {
		// The worker shares the kernel's cgroup: the broker can tell it
		// from nothing else there, which is what unisolated means.
		if cg = r.Cgroup(); cg == "" {
			r.Close()
			e.destroy(ctx, id)
			return nil, errors.New("episode: the unisolated backend did not say which cgroup its worker runs in")
		}
	}
	e.cgroup.Store(&cg)
	return r, nil
}

// checkpoint takes and records a stable checkpoint of the current
// generation (see the snapshot rule in doc.go).
func (e *Episode) checkpoint(ctx context.Context) error {
	if err := e.awaitBase(); err != nil {
		return err
	}
	e.mu.Lock()
	gen := e.gen
	e.mu.Unlock()
	_, err := e.checkpointOf(ctx, e.k.launcherID(e.id, gen), gen)
	return err
}

// checkpointOf checkpoints the launcher domain id and records it as a
// stable checkpoint of generation gen; it returns the digest (hex).
func (e *Episode) checkpointOf(ctx context.Context, id string, gen int) (string, error) {
	res, err := e.k.cfg.Domains.Checkpoint(ctx, id)
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	epoch, dom := e.epoch, e.domainID
	e.taken = append(e.taken, heldCheckpoint{id, res.SHA256})
	e.mu.Unlock()
	// Replicated before it is recorded: a kernel lost between the two
	// leaves the previous stable checkpoint, and its replica, the one a
	// takeover resumes from.
	e.replicate(ctx, res.SHA256)
	c, err := e.k.cfg.Store.RecordCheckpoint(ctx, store.NewCheckpoint{EpisodeID: e.id, DomainID: dom, Generation: gen, Epoch: epoch,
		Digest: "sha256:" + res.SHA256, Stable: true})
	if err != nil {
		return "", err
	}
	// The newest stable checkpoint is the only one a repair or a resumed
	// episode restores (LatestStableCheckpoint), and the domain loop that
	// takes checkpoints is the one that repairs: what it superseded goes
	// back now, or a long episode would fill its domain's quota.
	newest := heldCheckpoint{id, res.SHA256}
	e.mu.Lock()
	e.digests[c.ID] = res.SHA256
	var superseded []heldCheckpoint
	for _, h := range e.taken {
		if h != newest {
			superseded = append(superseded, h)
		}
	}
	e.taken = []heldCheckpoint{newest}
	e.mu.Unlock()
	e.release(superseded)
	return res.SHA256, nil
}

// baseLauncherID names the pristine domain baseCheckpoint makes for
// generation gen (1, or one a kernel restart resumed before its base).
func (k *Controller) baseLauncherID(ep uuid.UUID, gen int) string {
	return k.launcherID(ep, gen) + "-base"
}

// baseCheckpoint takes and records generation 1's stable starting point: a
// domain of the episode's workspace whose only process is a no-op shell
// (no worker code, no broker socket) is checkpointed once that process has
// exited, then destroyed. The launcher starts a worker as it creates its
// domain, so a checkpoint of the worker's own domain would hold whatever it
// had written by then; this one holds the base OID's tree and nothing else
// — with from, a setup layer's digest, restored over it (setup.go), on the
// spec's rootfs, which must be wantRootfs when that is set (errStaleLayer,
// before anything is recorded). It returns the base's digest and the
// rootfs digest the domain ran on.
func (e *Episode) baseCheckpoint(ctx context.Context, from, wantRootfs string) (digest, rootfs string, err error) {
	// Generation 1's, or the generation a kernel restart resumed from the
	// workspace before that base was recorded.
	e.mu.Lock()
	gen := e.gen
	e.mu.Unlock()
	id := e.k.baseLauncherID(e.id, gen)
	spec := domain.Spec{ID: id, Generation: gen, WorkspaceID: e.id.String(), Argv: []string{"/bin/sh", "-c", ":"},
		Limits: e.spec.Limits, Seccomp: e.k.cfg.Seccomp}
	if from != "" {
		spec.Checkpoint, spec.Rootfs = from, e.spec.Rootfs
	}
	r, err := e.k.cfg.Domains.Create(ctx, spec)
	if err != nil {
		return "", "", fmt.Errorf("episode: base domain: %w", err)
	}
	defer func() {
		r.Close()
		if derr := e.destroy(context.WithoutCancel(ctx), id); derr != nil && err == nil {
			err = derr
		}
	}()
	rootfs = r.Started.RootfsDigest
	if from != "" && r.Started.Restored != from {
		return "", "", fmt.Errorf("episode: launcher restored %q, want the setup layer", r.Started.Restored)
	}
	if wantRootfs != "" && rootfs != wantRootfs {
		return "", "", fmt.Errorf("%w (%s here, %s there)", errStaleLayer, rootfs, wantRootfs)
	}
	if _, err := waitExited(ctx, r, 30*time.Second); err != nil {
		return "", "", fmt.Errorf("episode: base domain: %w", err)
	}
	digest, err = e.checkpointOf(ctx, id, gen)
	return digest, rootfs, err
}

// startBase takes the pristine base checkpoint in the background, while
// the worker starts. Start returns only once it is recorded, and until then no other checkpoint is taken and no repair
// restores (awaitBase): it is always the episode's first stable one.
func (e *Episode) startBase(ctx context.Context) {
	done := make(chan struct{})
	e.mu.Lock()
	e.base, e.baseErr = done, nil
	e.mu.Unlock()
	go func() {
		_, _, err := e.baseCheckpoint(ctx, "", "")
		e.mu.Lock()
		e.baseErr = err
		e.mu.Unlock()
		close(done)
	}()
}

// awaitBase waits for the base checkpoint startBase took, and says whether
// it was recorded.
func (e *Episode) awaitBase() error {
	e.mu.Lock()
	done := e.base
	e.mu.Unlock()
	if done == nil {
		return nil
	}
	<-done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.baseErr
}

// domain is the supervisor's last child: it runs the generations, one at a
// time, and repairs between them. Whatever ends it, its domain is destroyed
// before it returns.
func (e *Episode) domain(ctx context.Context, checkpoint string, ready func(), started chan<- error) (err error) {
	if checkpoint == "" && e.spec.Setup != nil {
		// The setup layer first: generation 1 restores the base made
		// from it (setup.go).
		if checkpoint, err = e.setupBase(ctx); err != nil {
			started <- err
			return err
		}
	} else if checkpoint == "" && e.k.feat.Checkpoints {
		// The pristine base is checkpointed beside generation 1, which
		// starts with an empty upper layer over the same workspace — the
		// tree the base holds — so the worker does not wait for it.
		e.startBase(ctx)
		// Nothing ends with the base domain alive.
		defer e.awaitBase()
	}
	r, err := e.create(ctx, checkpoint)
	if err != nil {
		started <- err
		return err
	}
	defer func() {
		// Rest for one: this runs before the broker and the authority
		// stop, whatever stopped us.
		e.cgroup.Store(nil)
		e.mu.Lock()
		id := e.k.launcherID(e.id, e.gen)
		e.mu.Unlock()
		if derr := e.destroy(context.WithoutCancel(ctx), id); derr != nil && err == nil {
			err = derr
		}
		r.Close()
	}()
	if err := e.move(Running); err != nil {
		started <- err
		return err
	}
	// Start returns once the base is recorded: from then on the episode
	// has a stable checkpoint to repair or resume from (its worker, which
	// runs already, may be parked meanwhile).
	if err := e.awaitBase(); err != nil {
		err = fmt.Errorf("episode: base checkpoint: %w", err)
		started <- err
		return err
	}
	ready()
	started <- nil
	var wall <-chan time.Time
	if end, ok := e.wallDeadline(); ok {
		t := time.NewTimer(time.Until(end))
		defer t.Stop()
		wall = t.C
	}
	events := r.Events()
	for {
		select {
		case <-ctx.Done():
			return supervisor.ErrStopped
		case <-wall:
			// Agents retry forever without their model: the bound is the
			// kernel's, and nothing the worker left is harvested.
			e.log.Warn("wall time reached", "wall_time", e.k.wallTime(e.spec))
			return e.finish(ctx, Outcome{Kind: OutcomeWallTime, Reason: "wall time of " + e.k.wallTime(e.spec).String() + " reached"})
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch {
			case ev.Violation != nil:
				// A kernel denial is a critical frame: never dropped, and
				// the homeostat contains on it without smoothing; the
				// containment comes back through e.contain.
				// The destination a refused connect or send named is read from
				// the worker's memory: evidence for the operator (where it
				// tried to go), bounded and cleaned, never trusted.
				reason := "violation: " + ev.Violation.Syscall
				if d := printableDestination(ev.Violation.Destination); d != "" {
					reason += " to " + d
				}
				e.traj.Remember(sensor.Event{Kind: sensor.EventViolation, Detail: ev.Violation.Syscall})
				if f := e.k.cfg.OnViolation; f != nil {
					f()
				}
				e.mu.Lock()
				epoch := e.epoch
				e.mu.Unlock()
				if e.traj.Observe(epoch, homeostat.Sample{Denial: homeostat.SeccompViolation}, reason, true) != nil {
					// A queue full of critical frames is itself containment.
					if r, err = e.repair(ctx, r, reason+" (sensor queue full)"); err != nil {
						return err
					}
					events = r.Events()
				}
			case ev.Exited != nil:
				e.mu.Lock()
				x := WorkerExit{Generation: e.gen, Epoch: e.epoch, Exited: ev.Exited, Output: r.Output()}
				e.mu.Unlock()
				select {
				case e.exits <- x:
				default:
				}
				if e.spec.Harvest != nil {
					// The worker is gone: its socket serves no one, and the
					// episode ends by itself with what it left.
					e.cgroup.Store(nil)
					return e.finish(ctx, e.harvest(ctx))
				}
			}
		case c := <-e.contain:
			e.mu.Lock()
			current := e.epoch
			e.mu.Unlock()
			if c.epoch != current {
				// Raised before the last repair fenced its epoch: that
				// generation is already gone.
				e.log.Info("containment of a fenced epoch ignored", "epoch", c.epoch, "current", current, "reason", c.reason)
				continue
			}
			if r, err = e.repair(ctx, r, "containment: "+c.reason); err != nil {
				return err
			}
			events = r.Events()
		case c := <-e.traj.Commits():
			eff, err := e.k.cfg.Store.Effect(ctx, c.EffectID)
			if err != nil || eff.EpisodeID != e.id {
				continue
			}
			if !c.Committed {
				// The target refused or failed it: the same failure again
				// and again is a loop the trajectory rule reads.
				e.traj.Remember(sensor.Event{Kind: sensor.EventCommandFailed, Detail: eff.Kind + " " + eff.TargetID + ": " + string(c.Code)})
				continue
			}
			e.traj.Remember(sensor.Event{Kind: sensor.EventEffectCommitted, Detail: eff.Kind})
			if !e.k.feat.Checkpoints {
				continue
			}
			if err := e.checkpoint(ctx); err != nil {
				// A missed checkpoint costs repair granularity, not
				// safety: the previous stable one still stands.
				e.log.Warn("post-commit checkpoint failed", "effect", c.EffectID, "error", err)
			}
		}
	}
}

// errContained ends the domain child after final containment.
var errContained = errors.New("episode: contained")

// destroy kills a launcher domain and proves it gone: destroy waits for an
// empty cgroup, and an inspect afterwards must find nothing.
func (e *Episode) destroy(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := e.k.cfg.Domains.Destroy(ctx, id); err != nil {
		return fmt.Errorf("episode: destroy %s: %w", id, err)
	}
	st, err := e.k.cfg.Domains.Inspect(ctx, id)
	if err != nil {
		return fmt.Errorf("episode: inspect %s: %w", id, err)
	}
	if st.Exists || st.Populated || st.Processes != 0 {
		return fmt.Errorf("episode: domain %s still exists after destroy", id)
	}
	return nil
}

// repair is ARCHITECTURE §6: advance the epoch, destroy the domain and
// prove it empty, verify the last stable checkpoint, restore it into a new
// generation under a narrower lease. The lineage is the epoch advance's.
func (e *Episode) repair(ctx context.Context, old *domain.Running, reason string) (*domain.Running, error) {
	if !e.k.feat.Checkpoints {
		// Nothing to restore: containing is the only honest answer.
		e.log.Warn("containing: the domain backend cannot checkpoint", "backend", e.k.feat.Backend, "reason", reason)
		return old, e.containFinal(ctx, old, noCheckpoints(e.k.feat)+"; last: "+reason)
	}
	if err := e.move(Repairing); err != nil {
		return old, err
	}
	// The old generation loses the broker before anything else.
	e.cgroup.Store(nil)
	st := e.k.cfg.Store
	e.mu.Lock()
	from, gen, dom, repairs, prev := e.epoch, e.gen, e.domainID, e.repairs, e.leaseCap
	e.mu.Unlock()
	e.log.Warn("repairing", "reason", reason, "epoch", from, "generation", gen)

	if repairs >= e.spec.MaxRepairs {
		return old, e.containFinal(ctx, old, fmt.Sprintf("max_repairs (%d) exhausted; last: %s", e.spec.MaxRepairs, reason))
	}
	_ = e.awaitBase() // a failed base leaves no stable checkpoint: contained below
	ckpt, err := st.LatestStableCheckpoint(ctx, e.id)
	if err != nil {
		return old, e.containFinal(ctx, old, "no stable checkpoint to repair from; last: "+reason)
	}
	adv, err := st.AdvanceEpoch(ctx, store.AdvanceEpoch{EpisodeID: e.id, FromEpoch: from, Reason: "repair: " + reason, CheckpointID: &ckpt.ID})
	if err != nil {
		return old, err
	}
	e.mu.Lock()
	e.epoch = adv.Lineage.ToEpoch
	e.mu.Unlock()
	// The old trajectory ended with the old epoch; its queued frames are
	// ignored from now on.
	e.traj.Reset(reason)
	if err := e.destroy(ctx, e.k.launcherID(e.id, gen)); err != nil {
		return old, err
	}
	old.Close()
	if _, err := st.DestroyGeneration(ctx, dom, gen); err != nil {
		return old, err
	}
	digest, err := e.checkpointDigest(ckpt)
	if err != nil {
		return old, e.containFinal(ctx, nil, err.Error())
	}
	g, err := st.NewGeneration(ctx, store.NewGeneration{DomainID: dom, Epoch: adv.Lineage.ToEpoch, CheckpointID: &ckpt.ID})
	if err != nil {
		return old, err
	}
	_, _, narrow, _ := e.spec.validate(e.k.policyKeys())
	lease := authority.Intersect(prev, narrow).Narrow(e.k.ceiling())
	if err := e.grant(ctx, lease); err != nil {
		return old, err
	}
	e.mu.Lock()
	e.gen, e.repairs = g.Generation, repairs+1
	e.mu.Unlock()
	r, err := e.create(ctx, digest)
	if err != nil {
		return old, err
	}
	if err := e.move(Running); err != nil {
		return r, err
	}
	e.log.Info("repaired", "epoch", adv.Lineage.ToEpoch, "generation", g.Generation, "staled", len(adv.StaledEffects))
	return r, nil
}

// noCheckpoints is the containment reason on a backend that cannot
// checkpoint.
func noCheckpoints(f domain.Features) string {
	return "no checkpoint exists on the " + f.Backend + " backend, which cannot checkpoint: the episode cannot be repaired"
}

// checkpointDigest is a checkpoint record's digest, once the record is
// checked against what the launcher returned when this controller took it (the launcher re-hashes the archive on
// restore, and create checks it restored exactly this digest).
func (e *Episode) checkpointDigest(c store.Checkpoint) (string, error) {
	hex, ok := strings.CutPrefix(c.Digest, "sha256:")
	if !ok || !protocol.ValidDigest(hex) || c.EpisodeID != e.id || !c.Stable {
		return "", errors.New("checkpoint record is malformed")
	}
	e.mu.Lock()
	taken, known := e.digests[c.ID]
	e.mu.Unlock()
	if known && taken != hex {
		return "", errors.New("checkpoint record disagrees with the digest the launcher returned")
	}
	return hex, nil
}

// containFinal ends the episode contained, with its reason in the store.
// Pending effects were already staled by the epoch advance, or are by the
// episode leaving active (commit check 1).
func (e *Episode) containFinal(ctx context.Context, old *domain.Running, why string) error {
	e.cgroup.Store(nil)
	e.mu.Lock()
	gen, epoch := e.gen, e.epoch
	e.mu.Unlock()
	derr := e.destroy(ctx, e.k.launcherID(e.id, gen))
	if old != nil {
		old.Close()
	}
	if derr != nil {
		return derr
	}
	if err := e.recordEnd(func() error {
		_, err := e.k.cfg.Store.EndEpisode(ctx, store.EndEpisode{EpisodeID: e.id, Epoch: epoch, State: store.EpisodeContained, Reason: why})
		return err
	}); err != nil {
		return err
	}
	e.releaseCheckpoints()
	e.mu.Lock()
	err := e.moveLocked(Contained, why)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	e.log.Warn("contained", "why", why)
	return errContained
}

// settle runs after the supervisor stopped: an episode still active in our
// view lost its authority or broker and is suspended until resumed.
func (e *Episode) settle() {
	if e.ln != nil {
		e.ln.Close()
	}
	e.closeServices()
	e.mu.Lock()
	if e.outcome != nil || e.state == Contained {
		// Ended by itself (finish), or contained for good (containFinal,
		// recorded): its host objects go as End's do, and the controller
		// drives it no more — a follower sees it ended. The archives go
		// before the controller forgets it, so Drain waits for both.
		e.mu.Unlock()
		e.releaseCheckpoints()
		e.cleanupStart()
		return
	}
	if !e.ending && !e.state.Final() && Allowed(e.state, Suspended) {
		why := ""
		if e.exit != nil {
			why = e.exit.Error()
		}
		_ = e.moveLocked(Suspended, why) // allowed: checked above
	}
	e.mu.Unlock()
}

// End stops the episode and records it final (completed or aborted): the
// domain is destroyed first, then the episode ends in the store.
func (e *Episode) End(ctx context.Context, to State, reason string) error {
	if to != Completed && to != Aborted {
		return &ErrIllegalTransition{From: e.Status().State, To: to}
	}
	e.mu.Lock()
	if err := transition(e.state, to); err != nil {
		e.mu.Unlock()
		return err
	}
	e.ending = true
	e.mu.Unlock()
	if e.stop != nil {
		e.stop()
		<-e.done
	}
	e.mu.Lock()
	epoch := e.epoch
	e.mu.Unlock()
	if err := e.recordEnd(func() error {
		_, err := e.k.cfg.Store.EndEpisode(ctx, store.EndEpisode{EpisodeID: e.id, Epoch: epoch, State: to.storeState(), Reason: reason})
		return err
	}); err != nil {
		return err
	}
	e.mu.Lock()
	err := e.moveLocked(to, reason)
	e.mu.Unlock()
	e.releaseCheckpoints()
	e.cleanupStart()
	return err
}

// recordEnd records the episode's end in the store by record, the
// episode marked closing meanwhile: from the moment its end may be
// recorded until it has let go of its host objects, a stopping kernel's
// Drain waits for it. A failed record unmarks it (it stays active in the
// store, and the next kernel settles it).
func (e *Episode) recordEnd(record func() error) error {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	err := record()
	if err != nil {
		e.mu.Lock()
		e.closing = false
		e.mu.Unlock()
	}
	return err
}

// checkpointReleaser is a domain backend whose checkpoint store gives back
// what a domain holds (the launcher's release, protocol version 2).
type checkpointReleaser interface {
	Release(ctx context.Context, id, digest string) (*protocol.CheckpointResult, error)
}

// heldCheckpoint is one archive and the launcher domain holding it.
type heldCheckpoint struct{ domain, digest string }

// releaseCheckpoints gives back every archive this controller took for the
// episode. It runs only once the store has recorded the episode's end:
// nothing resumes or repairs it after that, the queue cannot take it over,
// and its harvest (which reads the final archive) is behind it. An archive
// another domain holds too (the same upper layer) stays in the store.
func (e *Episode) releaseCheckpoints() {
	e.mu.Lock()
	taken := e.taken
	e.taken = nil
	e.mu.Unlock()
	e.release(taken)
}

// release gives back the archives in taken, logging what it could not.
func (e *Episode) release(taken []heldCheckpoint) {
	rel, ok := e.k.cfg.Domains.(checkpointReleaser)
	if !ok || len(taken) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range taken {
		if _, err := rel.Release(ctx, c.domain, c.digest); err != nil {
			e.log.Warn("could not release a checkpoint; it stays in the store", "domain", c.domain, "digest", c.digest, "error", err)
		}
	}
}

// cleanupStart releases host objects of an episode that no longer runs.
func (e *Episode) cleanupStart() {
	if e.ln != nil {
		e.ln.Close()
	}
	if e.workspace {
		_ = workspace.Remove(e.k.cfg.WorkspacesRoot, e.id.String())
	}
	_ = os.Remove(e.k.socketPath(e.id))
	e.closeServices()
	e.k.forget(e.id)
}

// printableDestination bounds a violation's destination to what an
// address says ("1.1.1.1:443", "[2001:db8::1]:53", "family 17").
func printableDestination(d string) string {
	if len(d) > 64 {
		d = d[:64]
	}
	for _, c := range d {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.ContainsRune(".:[] -", c)) {
			return ""
		}
	}
	return d
}
