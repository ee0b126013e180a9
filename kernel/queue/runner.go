package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// Store is the queue as the runner needs it (*store.Postgres).
type Store interface {
	ClaimTask(ctx context.Context, req store.Claim) (store.Task, bool, error)
	StartTask(ctx context.Context, id uuid.UUID, token int64, episode uuid.UUID) (store.Task, error)
	ReleaseTask(ctx context.Context, id uuid.UUID, token int64, requeue bool, reason string) (store.Task, error)
	ResumeTask(ctx context.Context, id uuid.UUID, token int64, reason string) (store.Task, error)
	EndTask(ctx context.Context, id, episode uuid.UUID, state store.EpisodeState, reason string) (store.Task, error)
	HeartbeatTasks(ctx context.Context, ttl time.Duration) ([]store.Task, error)
	SweepTasks(ctx context.Context, grace time.Duration) (store.TaskSweep, error)
	PruneArchives(ctx context.Context) (int64, error)
}

// Episodes is the kernel's episode controller as the runner needs it.
type Episodes interface {
	// Start validates spec strictly and starts it as an episode here.
	Start(ctx context.Context, spec []byte) (uuid.UUID, error)
	// Abort ends an episode this kernel drives; driven is false when it
	// does not drive it.
	Abort(ctx context.Context, id uuid.UUID, reason string) (driven bool, err error)
	// TakeOver fences an episode whose kernel is gone and resumes it here
	// from its last stable checkpoint (store.EpisodeActive), or says how
	// it ended.
	TakeOver(ctx context.Context, id uuid.UUID, reason string) (store.EpisodeState, string, error)
	// MaxClass is the class the kernel's autonomy allows now.
	MaxClass() int
}

// Config configures a Runner.
type Config struct {
	Store    Store
	Episodes Episodes
	// Slots is how many tasks this kernel runs at once.
	Slots int
	// ProjectCaps and DefaultCap bound each project's tasks claimed or
	// running at once across the database's kernels (0: no bound).
	ProjectCaps map[string]int
	DefaultCap  int
	// ClaimTTL is a claim's lease before its episode runs.
	ClaimTTL time.Duration
	// Interval is how often the runner heartbeats, sweeps and claims.
	Interval time.Duration
	// Grace is how long after its episode's ownership lease expired a
	// task is swept for takeover.
	Grace time.Duration
	// MaxAttempts bounds the starts a task gets when its kernel cannot
	// start it for a passing reason; MaxTakeovers bounds its takeovers.
	MaxAttempts, MaxTakeovers int
	Logger                    hclog.Logger
}

// Runner claims, starts, watches and sweeps tasks for one kernel.
type Runner struct {
	cfg  Config
	log  hclog.Logger
	poke chan struct{}

	mu       sync.Mutex
	aborting map[uuid.UUID]bool // episodes a cancel is aborting
}

// New makes a runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Store == nil || cfg.Episodes == nil {
		return nil, errors.New("queue: Store and Episodes are required")
	}
	if cfg.Slots <= 0 || cfg.ClaimTTL <= 0 || cfg.Interval <= 0 || cfg.MaxAttempts <= 0 || cfg.MaxTakeovers < 0 {
		return nil, errors.New("queue: slots, claim ttl, interval and max attempts must be positive")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Runner{cfg: cfg, log: cfg.Logger.Named("queue"), poke: make(chan struct{}, 1), aborting: map[uuid.UUID]bool{}}, nil
}

// Poke wakes the runner now (a task was submitted).
func (r *Runner) Poke() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// Run works the queue until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("queue tick", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.poke:
		}
	}
}

// Tick is one round: heartbeat what this kernel holds (aborting what was
// cancelled), sweep, then claim while a slot is free.
func (r *Runner) Tick(ctx context.Context) error {
	held, err := r.cfg.Store.HeartbeatTasks(ctx, r.cfg.ClaimTTL)
	if err != nil {
		return err
	}
	for _, t := range held {
		if t.CancelRequested && t.State == store.TaskRunning && t.EpisodeID != nil {
			r.cancel(ctx, *t.EpisodeID)
		}
	}
	sw, err := r.cfg.Store.SweepTasks(ctx, r.cfg.Grace)
	if len(sw.Requeued) > 0 {
		r.log.Info("tasks back in the queue: their kernel is gone", "tasks", sw.Requeued)
	}
	if err != nil {
		return err
	}
	if len(sw.Ended) > 0 {
		// Their episodes ended: the checkpoint replicas kept for a
		// takeover of them go.
		if _, err := r.cfg.Store.PruneArchives(ctx); err != nil {
			r.log.Warn("checkpoint replicas not pruned", "error", err)
		}
	}
	// Every task held is claimed or running here, but for those this
	// tick's sweep ended.
	ended := map[uuid.UUID]bool{}
	for _, id := range sw.Ended {
		ended[id] = true
	}
	busy := 0
	for _, t := range held {
		if !ended[t.ID] {
			busy++
		}
	}
	for ; busy < r.cfg.Slots; busy++ {
		t, ok, err := r.cfg.Store.ClaimTask(ctx, store.Claim{MaxClass: r.cfg.Episodes.MaxClass(), ProjectCaps: r.cfg.ProjectCaps,
			DefaultCap: r.cfg.DefaultCap, TTL: r.cfg.ClaimTTL})
		if err != nil || !ok {
			return err
		}
		if err := r.run(ctx, t); err != nil {
			r.log.Warn("task not started", "task", t.ID, "error", err)
		}
	}
	return nil
}

// cancel aborts an episode this kernel drives, once.
func (r *Runner) cancel(ctx context.Context, ep uuid.UUID) {
	r.mu.Lock()
	if r.aborting[ep] {
		r.mu.Unlock()
		return
	}
	r.aborting[ep] = true
	r.mu.Unlock()
	go func() {
		defer func() { r.mu.Lock(); delete(r.aborting, ep); r.mu.Unlock() }()
		if _, err := r.cfg.Episodes.Abort(context.WithoutCancel(ctx), ep, "the task was cancelled"); err != nil {
			r.log.Warn("cancel: abort", "episode", ep, "error", err)
		}
	}()
}

// run starts a claimed task. A takeover first fences the episode its lost
// kernel ran and resumes it here from its last stable checkpoint; where it
// cannot, the episode ends and the task runs again whole, as a new episode.
func (r *Runner) run(ctx context.Context, t store.Task) error {
	token := t.Claim.Token
	st := r.cfg.Store
	if t.EpisodeID != nil {
		state, reason, err := r.cfg.Episodes.TakeOver(ctx, *t.EpisodeID, "its task was taken over by "+t.Claim.Instance)
		if err != nil {
			// Its owner renewed after all: the task runs that episode
			// again (the sweep decides anew if the owner stops). Any
			// other failure sends it back to the queue.
			// Each failed takeover was a claim that counted one; past
			// max_takeovers the task fails with the reason rather than
			// being taken and refused without end.
			var rerr error
			if errors.Is(err, protocol.E(protocol.CodeStaleAuthority)) {
				_, rerr = st.ResumeTask(ctx, t.ID, token, err.Error())
			} else {
				_, rerr = st.ReleaseTask(ctx, t.ID, token, t.Takeovers <= r.cfg.MaxTakeovers, "takeover: "+err.Error())
			}
			return errors.Join(fmt.Errorf("takeover of episode %s: %w", *t.EpisodeID, err), rerr)
		}
		landed := state == store.EpisodeCompleted
		r.log.Info("task taken over", "task", t.ID, "episode", *t.EpisodeID, "state", string(state), "takeovers", t.Takeovers)
		tooMany := fmt.Sprintf("its kernel was lost %d times (max_takeovers %d)", t.Takeovers, r.cfg.MaxTakeovers)
		switch {
		case state == store.EpisodeActive && t.Takeovers <= r.cfg.MaxTakeovers:
			// Resumed here; a cancel requested meanwhile is the
			// heartbeat's to carry out, as for any running task.
			return r.started(ctx, t, *t.EpisodeID)
		case state == store.EpisodeActive:
			_, aerr := r.cfg.Episodes.Abort(context.WithoutCancel(ctx), *t.EpisodeID, tooMany)
			_, err := st.ReleaseTask(ctx, t.ID, token, false, tooMany)
			return errors.Join(aerr, err)
		case landed || t.CancelRequested:
			_, err := st.EndTask(ctx, t.ID, *t.EpisodeID, state, reason)
			return err
		case t.Takeovers > r.cfg.MaxTakeovers:
			_, err := st.ReleaseTask(ctx, t.ID, token, false, tooMany)
			return err
		}
	}
	id, err := r.cfg.Episodes.Start(ctx, t.Spec)
	if err != nil {
		requeue := passing(err) && t.Attempts < r.cfg.MaxAttempts
		_, rerr := st.ReleaseTask(ctx, t.ID, token, requeue, "start: "+err.Error())
		return errors.Join(err, rerr)
	}
	return r.started(ctx, t, id)
}

// started records that the task's episode id runs here (new, or resumed
// by a takeover).
func (r *Runner) started(ctx context.Context, t store.Task, id uuid.UUID) error {
	if _, err := r.cfg.Store.StartTask(ctx, t.ID, t.Claim.Token, id); err != nil {
		// The claim moved on while the episode started (this kernel was
		// too slow to renew it): the episode is not the task's, so it
		// must not run.
		_, aerr := r.cfg.Episodes.Abort(context.WithoutCancel(ctx), id, "its task's claim was lost before it started")
		return errors.Join(err, aerr)
	}
	r.log.Info("task started", "task", t.ID, "episode", id, "project", t.Project, "attempt", t.Attempts)
	return nil
}

// passing: a start refused for a reason that may pass (the store, the
// kernel's load) is tried again; a refused spec never is.
func passing(err error) bool {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return true
	}
	switch pe.Code {
	case protocol.CodeAuthorityUnavailable, protocol.CodeEffectBrokerSaturated, protocol.CodeInternal:
		return true
	}
	return false
}
