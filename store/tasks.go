package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store/ledger"
)

// Tasks: the durable queue every kernel of one database shares (issue 25
// §1). A task is an episode spec waiting for a kernel. A kernel claims the
// first ready task under a claim lease (its instance and process, a token
// the database increments, an expiry on the database's clock); once the
// task's episode runs, that episode's ownership lease is what says its
// kernel lives. A task whose claim expired before it ran, or whose
// episode's owner is gone, goes back to the queue: a claim that names an
// episode is a takeover. Every change appends to the task's own
// hash-chained ledger in the same transaction.

// TaskState is where a task stands.
type TaskState string

const (
	TaskQueued  TaskState = "queued"
	TaskClaimed TaskState = "claimed" // a kernel holds it; no episode runs yet
	TaskRunning TaskState = "running" // its episode runs
	// TaskEnded: its episode ended; Outcome and Reason say how.
	TaskEnded     TaskState = "ended"
	TaskCancelled TaskState = "cancelled"
	// TaskFailed: it could not run to an episode's end (its spec refused
	// at start, its kernels lost too often).
	TaskFailed TaskState = "failed"
)

// Done reports whether s is final.
func (s TaskState) Done() bool { return s == TaskEnded || s == TaskCancelled || s == TaskFailed }

// Task is one queued unit of work.
type Task struct {
	ID         uuid.UUID       `json:"id"`
	Project    string          `json:"project"`
	Priority   int             `json:"priority"`
	MinClass   int             `json:"min_class"`
	Submitter  string          `json:"submitter"`
	Spec       json.RawMessage `json:"-"`
	SpecDigest string          `json:"spec_digest"`
	State      TaskState       `json:"state"`
	// Claim is the kernel that holds the task (claimed or running).
	Claim *TaskClaim `json:"claim,omitempty"`
	// EpisodeID is the episode the task runs now (or ran last).
	EpisodeID *uuid.UUID `json:"episode_id,omitempty"`
	// Episodes are every episode the task ran, in order.
	Episodes        []uuid.UUID `json:"episodes"`
	Attempts        int         `json:"attempts"`
	Takeovers       int         `json:"takeovers"`
	CancelRequested bool        `json:"cancel_requested,omitempty"`
	// Reserve is what the task holds against its project's budget while
	// it is claimed or running; Spent what its episodes used, settled as
	// each claim ends.
	Reserve Reserve `json:"reserve"`
	Spent   Reserve `json:"spent"`
	// Blocked says why the queue holds the task back (its project's
	// budget cannot take its reserve), or is empty.
	Blocked string `json:"blocked,omitempty"`
	// EmergencyGranted: an operator approved the task's budget Action; its
	// next claim may draw on the emergency reserve, once.
	EmergencyGranted bool `json:"emergency_granted,omitempty"`
	held             bool
	// episodeSettled is what settles already spent of the current
	// episode's use (a resumed episode's usage is cumulative).
	episodeSettled Reserve
	// Outcome is the final episode state (ended), or empty.
	Outcome    string      `json:"outcome,omitempty"`
	Reason     string      `json:"reason,omitempty"`
	LedgerHead ledger.Head `json:"-"`
	CreatedAt  time.Time   `json:"created_at"`
	UpdatedAt  time.Time   `json:"updated_at"`
	EndedAt    *time.Time  `json:"ended_at,omitempty"`
	// token is the last claim's token, kept when the claim is gone: the
	// next claim's is greater.
	token int64
}

// TaskClaim is a kernel's lease on a task.
type TaskClaim struct {
	Instance  string    `json:"instance"`
	Process   uuid.UUID `json:"process"`
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// NewTask is a submission.
type NewTask struct {
	Project   string
	Priority  int
	MinClass  int
	Submitter string
	Spec      json.RawMessage
	// Reserve is what the task's episode may use at most (its policy's
	// inference budget, its wall time): held at admission.
	Reserve Reserve
}

// Claim asks for the first ready task this kernel may run.
type Claim struct {
	// MaxClass is the class the kernel's autonomy allows now: a task
	// needing more waits (its lease would be minted too narrow to land).
	MaxClass int
	// ProjectCaps bounds the tasks of a project claimed or running at
	// once across every kernel of the database; DefaultCap applies to a
	// project it does not name (0: no bound).
	ProjectCaps map[string]int
	DefaultCap  int
	TTL         time.Duration
}

// Limits of the queue.
const (
	maxTaskSpec      = 1 << 20
	maxTaskPriority  = 1000
	maxTaskClaimTTL  = 10 * time.Minute
	maxTaskSubmitter = 128
	// MaxQueuedTasks bounds the tasks waiting across one database's
	// kernels: beyond it a submission is effect_broker_saturated.
	MaxQueuedTasks = 100000
)

var projectName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

const taskCols = `id, project, priority, min_class, submitter, spec, spec_digest, state, claim_instance, claim_process,
	claim_token, claim_expires_at, episode_id, episodes, attempts, takeovers, cancel_requested, outcome, reason,
	ledger_seq, ledger_head, created_at, updated_at, ended_at, reserve_spend, reserve_tokens, reserve_wall_ms, held,
	spent_spend, spent_tokens, spent_wall_ms, blocked, emergency_granted, reserve_egress_bytes, spent_egress_bytes,
	episode_settled`

func scanTask(r pgx.Row) (Task, error) {
	var t Task
	var inst *string
	var proc *uuid.UUID
	var token int64
	var exp *time.Time
	var outcome, reason, blocked *string
	var head []byte
	var spec string
	var settled []byte
	err := r.Scan(&t.ID, &t.Project, &t.Priority, &t.MinClass, &t.Submitter, &spec, &t.SpecDigest, &t.State, &inst, &proc,
		&token, &exp, &t.EpisodeID, &t.Episodes, &t.Attempts, &t.Takeovers, &t.CancelRequested, &outcome, &reason,
		&t.LedgerHead.Seq, &head, &t.CreatedAt, &t.UpdatedAt, &t.EndedAt, &t.Reserve.SpendMicroUSD, &t.Reserve.Tokens, &t.Reserve.WallMS,
		&t.held, &t.Spent.SpendMicroUSD, &t.Spent.Tokens, &t.Spent.WallMS, &blocked, &t.EmergencyGranted, &t.Reserve.EgressBytes, &t.Spent.EgressBytes, &settled)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(settled, &t.episodeSettled); err != nil {
		return t, err
	}
	t.token = token
	t.Spec = json.RawMessage(spec)
	if exp != nil {
		c := TaskClaim{Token: token, ExpiresAt: exp.UTC()}
		if inst != nil {
			c.Instance = *inst
		}
		if proc != nil {
			c.Process = *proc
		}
		t.Claim = &c
	}
	if outcome != nil {
		t.Outcome = *outcome
	}
	if reason != nil {
		t.Reason = *reason
	}
	if blocked != nil {
		t.Blocked = *blocked
	}
	if t.Episodes == nil {
		t.Episodes = []uuid.UUID{}
	}
	copy(t.LedgerHead.Hash[:], head)
	return t, nil
}

// ttask is one task mutation: the row locked, the database's clock, and
// the ledger entries to append with the row's new state.
type ttask struct {
	ctx    context.Context
	tx     pgx.Tx
	t      Task
	token  int64
	now    time.Time
	events []ledger.Entry
}

func (m *ttask) emit(kind string, body map[string]any) error {
	head := m.t.LedgerHead
	if n := len(m.events); n > 0 {
		head = ledger.Head{Seq: m.events[n-1].Seq, Hash: m.events[n-1].Hash}
	}
	e, err := ledger.Seal(head, m.t.ID, m.token+1, kind, m.now, body)
	if err != nil {
		return err
	}
	m.events = append(m.events, e)
	return nil
}

// save writes the task row and its new ledger entries.
func (m *ttask) save() error {
	if len(m.events) == 0 {
		return protocol.Errorf(protocol.CodeInternal, "store: task mutation without a ledger event")
	}
	last := m.events[len(m.events)-1]
	m.t.LedgerHead = ledger.Head{Seq: last.Seq, Hash: last.Hash}
	var b pgx.Batch
	for _, e := range m.events {
		b.Queue(`INSERT INTO task_events (task_id, seq, epoch, kind, body, at, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			e.EpisodeID, e.Seq, e.Epoch, e.Kind, string(e.Body), e.At, e.Prev[:], e.Hash[:])
	}
	var inst *string
	var proc *uuid.UUID
	var exp *time.Time
	if c := m.t.Claim; c != nil {
		inst, proc, exp = &c.Instance, &c.Process, &c.ExpiresAt
	}
	b.Queue(`UPDATE tasks SET state = $2, claim_instance = $3, claim_process = $4, claim_token = $5, claim_expires_at = $6,
		episode_id = $7, episodes = $8, attempts = $9, takeovers = $10, cancel_requested = $11, outcome = $12, reason = $13,
		ledger_seq = $14, ledger_head = $15, updated_at = $16, ended_at = $17, held = $18, spent_spend = $19, spent_tokens = $20,
		spent_wall_ms = $21, blocked = $22, emergency_granted = $23, spent_egress_bytes = $24, episode_settled = $25 WHERE id = $1`,
		m.t.ID, m.t.State, inst, proc, m.token, exp, m.t.EpisodeID, m.t.Episodes, m.t.Attempts, m.t.Takeovers,
		m.t.CancelRequested, nullable(m.t.Outcome), nullable(m.t.Reason), m.t.LedgerHead.Seq, m.t.LedgerHead.Hash[:], m.now, m.t.EndedAt,
		m.t.held, m.t.Spent.SpendMicroUSD, m.t.Spent.Tokens, m.t.Spent.WallMS, nullable(m.t.Blocked), m.t.EmergencyGranted, m.t.Spent.EgressBytes, settledJSON(m.t.episodeSettled))
	br := m.tx.SendBatch(m.ctx, &b)
	for i := 0; i < b.Len(); i++ {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
	}
	return br.Close()
}

func settledJSON(r Reserve) string {
	b, _ := json.Marshal(r)
	return string(b)
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// end makes the task final.
func (m *ttask) end(state TaskState, outcome, reason string) error {
	if err := m.settle(); err != nil {
		return err
	}
	if err := m.supersedeTaskAction(); err != nil {
		return err
	}
	m.t.State, m.t.Outcome, m.t.Reason, m.t.Claim = state, outcome, clip(reason), nil
	m.t.EndedAt = &m.now
	return m.emit("task_"+string(state), map[string]any{"outcome": outcome, "reason": m.t.Reason, "episode": m.t.EpisodeID})
}

// mutateTask runs fn on the task locked FOR UPDATE, then saves it.
func (p *Postgres) mutateTask(ctx context.Context, op string, id uuid.UUID, fn func(m *ttask) error) (Task, error) {
	var out Task
	err := p.run(ctx, op, pgx.TxOptions{}, func(tx pgx.Tx) error {
		m := &ttask{ctx: ctx, tx: tx}
		var err error
		if err = tx.QueryRow(ctx, `SELECT now()`).Scan(&m.now); err != nil {
			return err
		}
		m.now = m.now.UTC()
		m.t, err = scanTask(tx.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("task")
		}
		if err != nil {
			return err
		}
		m.token = m.t.token
		if err := fn(m); err != nil {
			return err
		}
		if len(m.events) == 0 { // nothing changed
			out = m.t
			return nil
		}
		if err := m.save(); err != nil {
			return err
		}
		out = m.t
		return nil
	})
	return out, err
}

// SubmitTask queues a task.
func (p *Postgres) SubmitTask(ctx context.Context, req NewTask) (Task, error) {
	switch {
	case !projectName.MatchString(req.Project):
		return Task{}, invalid("project must match %s", projectName)
	case req.Priority < -maxTaskPriority || req.Priority > maxTaskPriority:
		return Task{}, invalid("priority must be in [-%d, %d]", maxTaskPriority, maxTaskPriority)
	case req.MinClass < 0 || req.MinClass > 4:
		return Task{}, invalid("min_class must be in [0, 4]")
	case req.Submitter == "" || len(req.Submitter) > maxTaskSubmitter:
		return Task{}, invalid("submitter must be 1..%d bytes", maxTaskSubmitter)
	}
	if err := req.Reserve.check("reserve"); err != nil {
		return Task{}, err
	}
	spec, err := checkJSONObject("spec", req.Spec, maxTaskSpec)
	if err != nil {
		return Task{}, err
	}
	t := Task{ID: newID(), Project: req.Project, Priority: req.Priority, MinClass: req.MinClass, Submitter: req.Submitter,
		Spec: spec, SpecDigest: digestOf(spec), State: TaskQueued, Episodes: []uuid.UUID{}, Reserve: req.Reserve}
	err = p.run(ctx, "submit_task", pgx.TxOptions{}, func(tx pgx.Tx) error {
		var queued int
		if err := tx.QueryRow(ctx, `SELECT now(), (SELECT count(*) FROM tasks WHERE state = 'queued')`).Scan(&t.CreatedAt, &queued); err != nil {
			return err
		}
		if queued >= MaxQueuedTasks {
			return protocol.Errorf(protocol.CodeEffectBrokerSaturated, "%d tasks are queued already", queued)
		}
		t.CreatedAt = t.CreatedAt.UTC()
		t.UpdatedAt = t.CreatedAt
		if _, err := tx.Exec(ctx, `INSERT INTO tasks (id, project, priority, min_class, submitter, spec, spec_digest, state,
			claim_token, episodes, attempts, takeovers, cancel_requested, ledger_seq, ledger_head, created_at, updated_at,
			reserve_spend, reserve_tokens, reserve_wall_ms, held, spent_spend, spent_tokens, spent_wall_ms, reserve_egress_bytes)
			VALUES ($1, $2, $3, $4, $5, $6, $7, 'queued', 0, '{}', 0, 0, false, 0, $8, $9, $9, $10, $11, $12, false, 0, 0, 0, $13)`,
			t.ID, t.Project, t.Priority, t.MinClass, t.Submitter, string(spec), t.SpecDigest, make([]byte, 32), t.CreatedAt,
			t.Reserve.SpendMicroUSD, t.Reserve.Tokens, t.Reserve.WallMS, t.Reserve.EgressBytes); err != nil {
			return err
		}
		m := &ttask{ctx: ctx, tx: tx, t: t, now: t.CreatedAt}
		if err := m.emit("task_submitted", map[string]any{"project": t.Project, "priority": t.Priority, "min_class": t.MinClass,
			"submitter": t.Submitter, "spec_digest": t.SpecDigest, "reserve": t.Reserve}); err != nil {
			return err
		}
		if err := m.save(); err != nil {
			return err
		}
		t = m.t
		return nil
	})
	return t, err
}

// claimLock serialises claims across kernels, so per-project caps hold
// exactly (a claim is one short transaction).
const claimLock int64 = 0x6175746f5f7471 // "auto_tq"

// ClaimTask claims the first ready task — highest priority, then oldest —
// whose class the kernel's autonomy allows and whose project is under its
// cap. ok is false when none is ready. A task that names an episode is a
// takeover: its episode's kernel is gone.
func (p *Postgres) ClaimTask(ctx context.Context, req Claim) (Task, bool, error) {
	if req.TTL <= 0 || req.TTL > maxTaskClaimTTL {
		return Task{}, false, invalid("claim ttl must be in (0, %s]", maxTaskClaimTTL)
	}
	caps, err := json.Marshal(req.ProjectCaps)
	if err != nil {
		return Task{}, false, err
	}
	if req.ProjectCaps == nil {
		caps = []byte(`{}`)
	}
	var out Task
	var ok bool
	err = p.run(ctx, "claim_task", pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, claimLock); err != nil {
			return err
		}
		t, err := scanTask(tx.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks t WHERE state = 'queued' AND min_class <= $1
			AND (COALESCE(($2::jsonb ->> project)::int, $3) = 0
			     OR (SELECT count(*) FROM tasks a WHERE a.project = t.project AND a.state IN ('claimed', 'running'))
			        < COALESCE(($2::jsonb ->> project)::int, $3))
			AND NOT `+overBudget+`
			ORDER BY priority DESC, created_at, id LIMIT 1 FOR UPDATE`, req.MaxClass, string(caps), req.DefaultCap, EmergencyPriority))
		if errors.Is(err, pgx.ErrNoRows) {
			return p.markBlocked(ctx, tx, req.MaxClass)
		}
		if err != nil {
			return err
		}
		m := &ttask{ctx: ctx, tx: tx, t: t, token: t.token + 1}
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&m.now); err != nil {
			return err
		}
		m.now = m.now.UTC()
		// A grant of the emergency reserve is spent by this one claim.
		emergency := m.t.EmergencyGranted
		m.t.State, m.t.Blocked, m.t.EmergencyGranted = TaskClaimed, "", false
		m.t.Claim = &TaskClaim{Instance: p.instance, Process: p.process, Token: m.token, ExpiresAt: m.now.Add(req.TTL)}
		if err := m.hold(); err != nil {
			return err
		}
		if err := m.supersedeTaskAction(); err != nil {
			return err
		}
		takeover := t.EpisodeID != nil
		if takeover {
			m.t.Takeovers++
		} else {
			m.t.Attempts++
		}
		if err := m.emit("task_claimed", map[string]any{"instance": p.instance, "process": p.process, "token": m.token,
			"takeover": takeover, "episode": t.EpisodeID, "expires_at": m.t.Claim.ExpiresAt, "emergency_grant": emergency}); err != nil {
			return err
		}
		if err := m.save(); err != nil {
			return err
		}
		out, ok = m.t, true
		return nil
	})
	return out, ok, err
}

// requireClaim: only the claim that holds the task with token moves it on.
func (p *Postgres) requireClaim(m *ttask, token int64) error {
	c := m.t.Claim
	if c == nil || c.Token != token || c.Instance != p.instance || c.Process != p.process {
		return stale("the task's claim %d is not this kernel's (task is %s)", token, m.t.State)
	}
	return nil
}

// StartTask records that the claimed task runs as episode.
func (p *Postgres) StartTask(ctx context.Context, id uuid.UUID, token int64, episode uuid.UUID) (Task, error) {
	return p.mutateTask(ctx, "start_task", id, func(m *ttask) error {
		if err := p.requireClaim(m, token); err != nil {
			return err
		}
		if m.t.State != TaskClaimed {
			return protocol.Errorf(protocol.CodeIllegalTransition, "task is %s, not claimed", m.t.State)
		}
		// A takeover that resumed the task's episode runs the same one.
		resumed := m.t.EpisodeID != nil && *m.t.EpisodeID == episode
		m.t.State, m.t.EpisodeID = TaskRunning, &episode
		if !resumed {
			m.t.Episodes = append(m.t.Episodes, episode)
			m.t.episodeSettled = Reserve{}
		}
		return m.emit("task_started", map[string]any{"episode": episode, "token": token, "resumed": resumed})
	})
}

// ResumeTask gives back a takeover claim whose episode's kernel renewed
// after all (the taker could not take its ownership): the task runs that
// episode again, and the claim does not count as a takeover.
func (p *Postgres) ResumeTask(ctx context.Context, id uuid.UUID, token int64, reason string) (Task, error) {
	return p.mutateTask(ctx, "resume_task", id, func(m *ttask) error {
		if err := p.requireClaim(m, token); err != nil {
			return err
		}
		if m.t.State != TaskClaimed || m.t.EpisodeID == nil {
			return protocol.Errorf(protocol.CodeIllegalTransition, "task is %s, not claimed for a takeover", m.t.State)
		}
		m.t.State = TaskRunning
		m.t.Takeovers--
		return m.emit("task_takeover_refused", map[string]any{"episode": m.t.EpisodeID, "reason": clip(reason), "token": token})
	})
}

// ReleaseTask gives a claimed task up: back to the queue (the kernel could
// not start it now), or failed (it cannot start anywhere: reason says why).
func (p *Postgres) ReleaseTask(ctx context.Context, id uuid.UUID, token int64, requeue bool, reason string) (Task, error) {
	return p.mutateTask(ctx, "release_task", id, func(m *ttask) error {
		if err := p.requireClaim(m, token); err != nil {
			return err
		}
		if m.t.State != TaskClaimed {
			return protocol.Errorf(protocol.CodeIllegalTransition, "task is %s, not claimed", m.t.State)
		}
		if requeue && !m.t.CancelRequested {
			if err := m.settle(); err != nil {
				return err
			}
			m.t.State, m.t.Claim = TaskQueued, nil
			return m.emit("task_requeued", map[string]any{"reason": clip(reason), "token": token})
		}
		if m.t.CancelRequested {
			return m.end(TaskCancelled, "", "cancelled before it ran")
		}
		return m.end(TaskFailed, "", reason)
	})
}

// EndTask records the final outcome of the task's episode (state is the
// episode's end state). Any kernel may record it: it is read from the
// episode, and a task already final is left alone.
func (p *Postgres) EndTask(ctx context.Context, id uuid.UUID, episode uuid.UUID, state EpisodeState, reason string) (Task, error) {
	return p.mutateTask(ctx, "end_task", id, func(m *ttask) error {
		if m.t.State.Done() {
			return nil
		}
		if m.t.EpisodeID == nil || *m.t.EpisodeID != episode {
			return stale("the task runs another episode now")
		}
		if m.t.CancelRequested && state != EpisodeCompleted {
			return m.end(TaskCancelled, string(state), reason)
		}
		return m.end(TaskEnded, string(state), reason)
	})
}

// CancelTask cancels a task: at once when no episode runs it, else it
// asks the kernel that runs it to abort the episode (the task ends
// cancelled when it has). Cancelling a final task is illegal_transition.
func (p *Postgres) CancelTask(ctx context.Context, id uuid.UUID, who string) (Task, error) {
	return p.mutateTask(ctx, "cancel_task", id, func(m *ttask) error {
		switch {
		case m.t.State.Done():
			return protocol.Errorf(protocol.CodeIllegalTransition, "task is already %s", m.t.State)
		case m.t.CancelRequested:
			return nil
		case m.t.State == TaskQueued && m.t.EpisodeID == nil:
			return m.end(TaskCancelled, "", "cancelled by "+who)
		}
		m.t.CancelRequested = true
		return m.emit("task_cancel_requested", map[string]any{"by": clip(who)})
	})
}

// HeartbeatTasks renews every claim this process holds on a task not yet
// running (a running task lives by its episode's ownership lease) and
// returns the tasks this process holds, claimed or running, so the kernel
// sees what was cancelled or taken from it.
func (p *Postgres) HeartbeatTasks(ctx context.Context, ttl time.Duration) ([]Task, error) {
	if ttl <= 0 || ttl > maxTaskClaimTTL {
		return nil, invalid("claim ttl must be in (0, %s]", maxTaskClaimTTL)
	}
	var out []Task
	err := p.run(ctx, "heartbeat_tasks", pgx.TxOptions{}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE tasks SET claim_expires_at = now() + $3::interval
			WHERE claim_instance = $1 AND claim_process = $2 AND state IN ('claimed', 'running')
			RETURNING `+taskCols, p.instance, p.process, ttl.String())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
		return err
	})
	return out, err
}

// TaskSweep is what one sweep did.
type TaskSweep struct {
	// Ended are tasks whose episode had ended.
	Ended []uuid.UUID
	// Requeued are tasks whose kernel is gone: back in the queue (a
	// running one for takeover).
	Requeued []uuid.UUID
}

// SweepTasks ends the tasks whose episode has ended and returns to the
// queue those whose kernel is gone: a claimed task whose claim expired, a
// running task whose episode's ownership lease expired at least grace
// ago (the episode's owner is the task's liveness). Any kernel may sweep;
// each task moves in its own transaction, re-checked under its lock.
func (p *Postgres) SweepTasks(ctx context.Context, grace time.Duration) (TaskSweep, error) {
	var out TaskSweep
	type cand struct {
		id       uuid.UUID
		episode  *uuid.UUID
		epState  *string
		requeue  bool
		epReason *string
	}
	var cands []cand
	err := p.query(ctx, "sweep_tasks", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT t.id, t.episode_id, e.state,
				(t.state = 'claimed' AND t.claim_expires_at < now())
				OR (t.state = 'running' AND e.state = 'active' AND e.owner_expires_at < now() - $1::interval),
				(SELECT v.body::jsonb ->> 'reason' FROM events v WHERE v.episode_id = e.id AND v.kind = 'episode_ended' ORDER BY v.seq DESC LIMIT 1)
			FROM tasks t LEFT JOIN episodes e ON e.id = t.episode_id
			WHERE (t.state = 'claimed' AND t.claim_expires_at < now())
			   OR (t.state = 'running' AND (e.state <> 'active' OR e.owner_expires_at < now() - $1::interval))
			LIMIT 1000`, grace.String())
		if err != nil {
			return err
		}
		cands, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (cand, error) {
			var c cand
			err := r.Scan(&c.id, &c.episode, &c.epState, &c.requeue, &c.epReason)
			return c, err
		})
		return err
	})
	if err != nil {
		return out, err
	}
	var errs []error
	for _, c := range cands {
		if !c.requeue {
			reason := ""
			if c.epReason != nil {
				reason = *c.epReason
			}
			if _, err := p.EndTask(ctx, c.id, *c.episode, EpisodeState(*c.epState), reason); err != nil {
				errs = append(errs, err)
				continue
			}
			out.Ended = append(out.Ended, c.id)
			continue
		}
		moved := false
		_, err := p.mutateTask(ctx, "requeue_task", c.id, func(m *ttask) error {
			var live bool
			if m.t.State == TaskRunning {
				if err := m.tx.QueryRow(m.ctx, `SELECT state = 'active' AND owner_expires_at < now() - $2::interval FROM episodes WHERE id = $1`,
					*m.t.EpisodeID, grace.String()).Scan(&live); err != nil {
					return err
				}
			} else {
				live = m.t.State == TaskClaimed && m.t.Claim != nil && m.t.Claim.ExpiresAt.Before(m.now)
			}
			if !live {
				return nil // renewed or moved on since the read
			}
			prev := m.t.Claim
			// What the lost episode used stays spent; the takeover
			// reserves again.
			if err := m.settle(); err != nil {
				return err
			}
			m.t.State, m.t.Claim = TaskQueued, nil
			moved = true
			return m.emit("task_requeued", map[string]any{"reason": "its kernel is gone", "previous": prev, "episode": m.t.EpisodeID})
		})
		if err != nil {
			errs = append(errs, err)
		} else if moved {
			out.Requeued = append(out.Requeued, c.id)
		}
	}
	return out, errors.Join(errs...)
}

// Task reads a task with its spec.
func (p *Postgres) Task(ctx context.Context, id uuid.UUID) (Task, error) {
	var out Task
	err := p.query(ctx, "task", func(tx querier) error {
		var err error
		out, err = scanTask(tx.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("task")
		}
		return err
	})
	return out, err
}

// TaskForEpisode reads the task an episode runs for, if any.
func (p *Postgres) TaskForEpisode(ctx context.Context, episode uuid.UUID) (Task, bool, error) {
	var out Task
	var ok bool
	err := p.query(ctx, "task_for_episode", func(tx querier) error {
		var err error
		out, err = scanTask(tx.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE episode_id = $1`, episode))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		ok = err == nil
		return err
	})
	return out, ok, err
}

// TaskFilter narrows a task listing.
type TaskFilter struct {
	State   TaskState
	Project string
	Limit   int
}

// Tasks lists tasks, newest first.
func (p *Postgres) Tasks(ctx context.Context, f TaskFilter) ([]Task, error) {
	if f.Limit <= 0 || f.Limit > MaxList {
		f.Limit = MaxList
	}
	var out []Task
	err := p.query(ctx, "list_tasks", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT `+taskCols+` FROM tasks WHERE ($1 = '' OR state = $1) AND ($2 = '' OR project = $2)
			ORDER BY created_at DESC, id DESC LIMIT $3`, string(f.State), f.Project, f.Limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Task, error) { return scanTask(r) })
		return err
	})
	return out, err
}

// TaskEvents reads a task's ledger in order.
func (p *Postgres) TaskEvents(ctx context.Context, id uuid.UUID) ([]ledger.Entry, error) {
	var out []ledger.Entry
	err := p.query(ctx, "task_events", func(tx querier) error {
		var err error
		out, err = readTaskEvents(ctx, tx, id)
		return err
	})
	return out, err
}

func readTaskEvents(ctx context.Context, tx querier, id uuid.UUID) ([]ledger.Entry, error) {
	rows, err := tx.Query(ctx, `SELECT task_id, seq, epoch, kind, body, at, prev_hash, hash FROM task_events WHERE task_id = $1 ORDER BY seq`, id)
	if err != nil {
		return nil, err
	}
	return collectEntries(rows)
}

// VerifyTaskLedger recomputes a task's chain against the head on its row.
func (p *Postgres) VerifyTaskLedger(ctx context.Context, id uuid.UUID) (ledger.Report, error) {
	var rep ledger.Report
	err := p.read(ctx, "verify_task_ledger", func(tx pgx.Tx) error {
		t, err := scanTask(tx.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("task")
		}
		if err != nil {
			return err
		}
		entries, err := readTaskEvents(ctx, tx, id)
		if err != nil {
			return err
		}
		rep = ledger.Verify(id, entries, &t.LedgerHead)
		return nil
	})
	return rep, err
}

// String names a task in logs.
func (t Task) String() string { return fmt.Sprintf("task %s (%s, %s)", t.ID, t.Project, t.State) }
