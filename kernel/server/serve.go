package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/console"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/metrics"
	"github.com/autonomic-kernel/autonomic/kernel/queue"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/pgcluster"
)

// Serve runs until ctx ends. It composes the kernel in one visible order
// — store, broker, verification, domain backend, episode controller — runs
// recovery (reconcile, fence, destroy, resume or contain) and only then
// opens the API, so no new work is admitted before recovery has finished.
func Serve(ctx context.Context, cfg *config.Config, log hclog.Logger, hooks Hooks) error {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	unlock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	if cfg.Domain.Backend == config.BackendUnsafeLocal {
		log.Warn("UNSAFE_LOCAL backend: workers run with NO isolation; development hosts only")
	}
	st, closeStore, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeStore()
	k, err := compose(cfg, st, log, hooks)
	if err != nil {
		return err
	}
	if unused := unusedKeys(cfg, k); len(unused) > 0 {
		log.Warn("configuration keys accepted but not used by this kernel", "keys", unused)
	}
	if gaps := verificationGaps(cfg); len(gaps) > 0 {
		log.Warn("automatic_verification: these git_commit targets have no verify_argv; their class 3+ effects cannot commit", "targets", gaps)
	}
	if gaps := cfg.UnverifiedGaps(); len(gaps) > 0 {
		log.Warn("automatic_verification: these kinds have class 3+ targets but no verification rule; their class 3+ effects are denied at evaluate until named in unverified_kinds", "kinds", gaps)
	}
	if err := k.recoverAtStart(ctx, log); err != nil {
		return err
	}
	// Payloads of settled effects and ended episodes go after
	// broker.payload_retention_hours.
	go k.broker.RunRetention(ctx, time.Hour)
	if k.episodes != nil {
		r := cfg.Regulator
		log.Info("system regulator", "level", k.regulator.State().Level.String(), "max_level", r.MaxLevel,
			"recover_after", r.RecoverAfter, "recover_for_ms", r.RecoverForMSValue(), "health_interval_ms", r.HealthIntervalMS)
		go regulator.NewHealthLoop(st, k.broker, k.regulator, time.Duration(r.HealthIntervalMS)*time.Millisecond).Watch(ctx)
	}

	gid := -1
	access := api.Access{KernelUID: uint32(os.Getuid()), OperatorGID: -1}
	if g := cfg.API.OperatorGroup; g != "" {
		grp, err := user.LookupGroup(g)
		if err != nil {
			return fmt.Errorf("api.operator_group: %w", err)
		}
		n, err := strconv.Atoi(grp.Gid)
		if err != nil {
			return fmt.Errorf("api.operator_group: gid %q", grp.Gid)
		}
		gid, access.OperatorGID = n, int64(n)
	}
	ac := api.Config{Store: st, Approver: k.broker, Settler: k.broker, Targets: k.targets, Preflight: k.domains.Preflight, Access: access, Logger: log, Payloads: k.payloads}
	if k.keys != nil {
		ac.Keys = k.keys
	}
	if k.episodes != nil {
		ctl := api.EpisodeController{Episodes: k.episodes, MaxRepairs: cfg.MaxRepairsValue()}
		ac.Controller = ctl
		ac.Kernel = func() api.KernelView {
			r := k.regulator.State()
			return api.KernelView{Autonomy: r.Level.String(), MaxClass: int(r.Level.MaxClass()), Faults: r.Faults.String(), AutonomySince: r.Since}
		}
		q := cfg.Queue
		for project, b := range q.ProjectBudgets {
			if _, err := st.SetProjectBudget(ctx, project, store.Caps{MaxSpend: b.MaxSpendMicroUSD, MaxTokens: b.MaxTokens, MaxWallMS: b.MaxWallMS,
				MaxEgress: b.MaxEgressBytes, Emergency: store.Reserve{SpendMicroUSD: b.EmergencySpendMicroUSD, Tokens: b.EmergencyTokens,
					WallMS: b.EmergencyWallMS, EgressBytes: b.EmergencyEgressBytes}}); err != nil {
				return fmt.Errorf("queue.project_budgets.%s: %w", project, err)
			}
		}
		runner, err := queue.New(queue.Config{Store: st, Episodes: queueEpisodes{ctl, k}, Slots: q.Slots, ProjectCaps: q.ProjectCaps,
			DefaultCap: q.DefaultProjectCap, ClaimTTL: time.Duration(q.ClaimTTLMS) * time.Millisecond,
			Interval: time.Duration(q.IntervalMS) * time.Millisecond, MaxAttempts: q.MaxAttempts, MaxTakeovers: q.MaxTakeoversValue(),
			Logger: log})
		if err != nil {
			return err
		}
		ac.Queue = runner
		k.episodes.OnEnd(func(uuid.UUID) { runner.Poke() })
		// The queue starts with the API: recovery has run, so the tasks
		// this kernel's episodes ran are its own again before it claims.
		defer runQueue(ctx, runner)()
	}
	srv, err := api.New(ac)
	if err != nil {
		return err
	}
	if m := cfg.API.MetricsListen; m != "" {
		if k.episodes != nil {
			k.metrics.SetAutonomy(func() int { return int(k.regulator.State().Level) })
		}
		k.metrics.SetSaturations(k.broker.Saturations)
		ml, err := metrics.Listen(m)
		if err != nil {
			return fmt.Errorf("api.metrics_listen: %w", err)
		}
		go func() {
			if err := k.metrics.Serve(ctx, ml); err != nil {
				log.Error("metrics endpoint stopped", "error", err)
			}
		}()
		log.Info("metrics served", "listen", m)
	}
	ln, err := api.Listen(cfg.APISocket(), os.Getuid(), gid)
	if err != nil {
		return err
	}
	if cl := cfg.API.ConsoleListen; cl != "" {
		if err := serveConsole(ctx, cfg, cl, gid, log); err != nil {
			ln.Close()
			return fmt.Errorf("api.console_listen: %w", err)
		}
	}
	log.Info("kernel serving", "socket", cfg.APISocket(), "backend", cfg.Domain.Backend, "managed_store", cfg.Managed(),
		"episodes", k.episodes != nil, "adapters", cfg.TargetKinds(), "automatic_verification", cfg.AutomaticVerification)
	go hostCheck(ctx, k.domains, log)
	if hooks.Ready != nil {
		hooks.Ready()
	}
	err = srv.Serve(ctx, ln)
	if k.episodes != nil {
		// An episode that ended just before the signal gives its archives
		// back first; one still running is the next kernel's to recover.
		dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		k.episodes.Drain(dctx)
		cancel()
	}
	return err
}

// drainTimeout bounds how long a stopping kernel waits for its ended
// episodes to let go of their host objects (well inside systemd's
// TimeoutStopSec).
const drainTimeout = 30 * time.Second

// queueEpisodes is the episode controller as the queue runs it.
type queueEpisodes struct {
	api.EpisodeController
	k *composition
}

func (q queueEpisodes) TakeOver(ctx context.Context, id uuid.UUID, reason string) (store.EpisodeState, string, error) {
	return q.k.episodes.TakeOver(ctx, id, reason)
}

func (q queueEpisodes) MaxClass() int { return int(q.k.regulator.State().Level.MaxClass()) }

// runQueue works the queue until ctx ends; the returned func waits for
// the runner to stop (before the store closes).
func runQueue(ctx context.Context, r *queue.Runner) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	return func() { cancel(); <-done }
}

// serveConsole serves the web console on listen (after the API socket
// exists: it reads through it), with a new token in state_dir for the
// operator group; a Unix socket is 0660, the kernel's and the group's.
func serveConsole(ctx context.Context, cfg *config.Config, listen string, gid int, log hclog.Logger) error {
	tok, err := console.MakeToken(cfg.StateDir, gid)
	if err != nil {
		return err
	}
	if p, ok := strings.CutPrefix(listen, "unix:"); ok {
		_ = os.Remove(p) // a stale socket of an earlier kernel (the state_dir lock makes it ours)
	}
	l, err := metrics.Listen(listen)
	if err != nil {
		return err
	}
	if p, ok := strings.CutPrefix(listen, "unix:"); ok {
		if err := errors.Join(os.Chown(p, -1, gid), os.Chmod(p, 0o660)); err != nil {
			l.Close()
			return err
		}
	}
	c := console.New(cfg.APISocket(), tok, listen)
	go func() {
		if err := c.Serve(ctx, l); err != nil {
			log.Error("console stopped", "error", err)
		}
	}()
	log.Info("console served", "listen", listen, "token_file", filepath.Join(cfg.StateDir, console.TokenFileName))
	return nil
}

// ErrStateDirBusy: another kernel serves from the same state_dir.
var ErrStateDirBusy = errors.New("another kernel is running on this state_dir")

// lockStateDir takes the state_dir's kernel lock (flock, released by the
// kernel's death): one kernel per state, so a second one never reaches the
// managed cluster, whose orphan recovery would stop a live kernel's
// postmaster.
func lockStateDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "kernel.lock"), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state_dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrStateDirBusy, dir)
		}
		return nil, fmt.Errorf("state_dir lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// openStore opens the configured store, starting the managed cluster when
// no URL is set. The returned func releases in reverse order.
func openStore(ctx context.Context, cfg *config.Config, log hclog.Logger) (*store.Postgres, func(), error) {
	instance := cfg.Store.InstanceID
	if instance == "" {
		// One kernel per state_dir (its lock): the host and state_dir name
		// the instance across restarts, so a restarted kernel takes its own
		// episodes back at once and another host's stay another's.
		host, _ := os.Hostname()
		dir, _ := filepath.Abs(cfg.StateDir)
		instance = host + ":" + dir
	}
	sc := store.Config{URL: cfg.Store.URL, AdminURL: cfg.Store.AdminURL, InstanceID: instance,
		OwnerTTL: time.Duration(cfg.OwnerTTLMS) * time.Millisecond, Logger: log}
	var cluster *pgcluster.Cluster
	if cfg.Managed() {
		if err := os.MkdirAll(cfg.ClusterDir(), 0o700); err != nil {
			return nil, nil, fmt.Errorf("store.cluster_dir: %w", err)
		}
		var err error
		cluster, err = pgcluster.Start(ctx, pgcluster.Config{Dir: cfg.ClusterDir(), Logger: log})
		if err != nil {
			return nil, nil, err
		}
		if err := cluster.CreateDatabase(ctx, cfg.Store.Database); err != nil && !duplicateDatabase(err) {
			stopCluster(cluster)
			return nil, nil, err
		}
		sc.URL, sc.AdminURL = cluster.KernelConnString(cfg.Store.Database), cluster.AdminConnString(cfg.Store.Database)
	}
	st, err := store.Open(ctx, sc)
	if err != nil {
		if cluster != nil {
			stopCluster(cluster)
		}
		return nil, nil, err
	}
	return st, func() {
		st.Close()
		if cluster != nil {
			stopCluster(cluster)
		}
	}, nil
}

func stopCluster(c *pgcluster.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.Stop(ctx)
}

func duplicateDatabase(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P04"
}

// Start runs Serve in the background and returns once the API answers, or
// Serve's error if it stopped before. stop ends it and returns Serve's
// result; it may be called more than once. (For embedding and tests; the
// command runs Serve in the foreground.)
func Start(ctx context.Context, cfg *config.Config, log hclog.Logger, hooks Hooks) (stop func() error, err error) {
	sctx, cancel := context.WithCancel(ctx)
	ready, done := make(chan struct{}), make(chan error, 1)
	then := hooks.Ready
	hooks.Ready = func() {
		if then != nil {
			then()
		}
		close(ready)
	}
	go func() { done <- Serve(sctx, cfg, log, hooks) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		return nil, err
	}
	var once sync.Once
	var result error
	return func() error {
		once.Do(func() { cancel(); result = <-done })
		return result
	}, nil
}

// hostCheck runs the domain backend's preflight once the kernel serves:
// the launcher verifies every rootfs it is configured with (in full once
// per boot), so the first episode does not wait for that, and what the
// host lacks is in the log before a task meets it.
func hostCheck(ctx context.Context, d domain.ExecutionDomain, log hclog.Logger) {
	rep, err := d.Preflight(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("host preflight failed", "error", err)
		}
	case rep.Verdict == "refused" || len(rep.Problems) > 0:
		log.Warn("host preflight", "verdict", rep.Verdict, "problems", rep.Problems)
	default:
		// degraded without a problem: limits this host's cgroups do not
		// enforce, which `autonomic preflight` lists one by one.
		log.Info("host preflight", "verdict", rep.Verdict)
	}
}
