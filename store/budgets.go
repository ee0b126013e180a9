package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Budgets reserved at admission (issue 25 §3). A task reserves, when a
// kernel claims it, what its episode may use at most — its policy's
// inference budget (the relay's hard cap), its wall time and its egress
// byte cap (the proxy's) — against its
// project's hard caps; the reservation is held while the task is claimed
// or running and settled to what its episode used when the claim ends
// (its relay budget's charge, which keeps what a dead kernel's calls may
// have spent). A cap keeps a named emergency reserve that only tasks of
// EmergencyPriority may draw on. A claim admits a task only when spent +
// reserved + its reserve stays within the cap, in the claim's transaction
// (serialised with every other claim), so concurrent kernels cannot
// overcommit a project.

// Reserve is an amount of each bounded resource.
type Reserve struct {
	SpendMicroUSD int64 `json:"spend_micro_usd"`
	Tokens        int64 `json:"tokens"`
	WallMS        int64 `json:"wall_ms"`
	EgressBytes   int64 `json:"egress_bytes"`
}

// maxReserve bounds every amount, so sums cannot overflow.
const maxReserve = 1 << 50

func (r Reserve) check(field string) error {
	for name, v := range map[string]int64{"spend_micro_usd": r.SpendMicroUSD, "tokens": r.Tokens, "wall_ms": r.WallMS, "egress_bytes": r.EgressBytes} {
		if v < 0 || v > maxReserve {
			return invalid("%s.%s must be in [0, %d]", field, name, int64(maxReserve))
		}
	}
	return nil
}

// EmergencyPriority is the priority from which a task may draw on its
// project's emergency reserve.
const EmergencyPriority = 900

// ProjectBudget is a project's caps (nil: no cap on that resource), its
// emergency reserve, what its claimed and running tasks hold and what its
// settled claims spent.
type ProjectBudget struct {
	Project     string     `json:"project"`
	MaxSpend    *int64     `json:"max_spend_micro_usd,omitempty"`
	MaxTokens   *int64     `json:"max_tokens,omitempty"`
	MaxWallMS   *int64     `json:"max_wall_ms,omitempty"`
	MaxEgress   *int64     `json:"max_egress_bytes,omitempty"`
	Emergency   Reserve    `json:"emergency_reserve"`
	Reserved    Reserve    `json:"reserved"`
	Spent       Reserve    `json:"spent"`
	ExhaustedAt *time.Time `json:"exhausted_at,omitempty"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// Caps is a project's caps as configured.
type Caps struct {
	MaxSpend, MaxTokens, MaxWallMS, MaxEgress *int64
	Emergency                                 Reserve
}

const budgetCols = `project, max_spend, max_tokens, max_wall_ms, emergency_spend, emergency_tokens, emergency_wall_ms,
	reserved_spend, reserved_tokens, reserved_wall_ms, spent_spend, spent_tokens, spent_wall_ms, exhausted_at, updated_at,
	max_egress_bytes, emergency_egress_bytes, reserved_egress_bytes, spent_egress_bytes`

func scanBudget(r pgx.Row) (ProjectBudget, error) {
	var b ProjectBudget
	err := r.Scan(&b.Project, &b.MaxSpend, &b.MaxTokens, &b.MaxWallMS, &b.Emergency.SpendMicroUSD, &b.Emergency.Tokens, &b.Emergency.WallMS,
		&b.Reserved.SpendMicroUSD, &b.Reserved.Tokens, &b.Reserved.WallMS, &b.Spent.SpendMicroUSD, &b.Spent.Tokens, &b.Spent.WallMS,
		&b.ExhaustedAt, &b.UpdatedAt, &b.MaxEgress, &b.Emergency.EgressBytes, &b.Reserved.EgressBytes, &b.Spent.EgressBytes)
	return b, err
}

// overBudget is true of a task t whose reserve its project's budget cannot
// take now ($4: EmergencyPriority).
const overBudget = `EXISTS (SELECT 1 FROM project_budgets b WHERE b.project = t.project AND (
	b.max_spend IS NOT NULL AND b.spent_spend + b.reserved_spend + t.reserve_spend >
		b.max_spend - CASE WHEN t.priority >= $4 OR t.emergency_granted THEN 0 ELSE b.emergency_spend END
	OR b.max_tokens IS NOT NULL AND b.spent_tokens + b.reserved_tokens + t.reserve_tokens >
		b.max_tokens - CASE WHEN t.priority >= $4 OR t.emergency_granted THEN 0 ELSE b.emergency_tokens END
	OR b.max_wall_ms IS NOT NULL AND b.spent_wall_ms + b.reserved_wall_ms + t.reserve_wall_ms >
		b.max_wall_ms - CASE WHEN t.priority >= $4 OR t.emergency_granted THEN 0 ELSE b.emergency_wall_ms END
	OR b.max_egress_bytes IS NOT NULL AND b.spent_egress_bytes + b.reserved_egress_bytes + t.reserve_egress_bytes >
		b.max_egress_bytes - CASE WHEN t.priority >= $4 OR t.emergency_granted THEN 0 ELSE b.emergency_egress_bytes END))`

// SetProjectBudget sets a project's caps and emergency reserve, keeping
// what it holds and spent. A new budget starts holding what the project's
// claimed and running tasks reserve (locked, so none settles meanwhile).
func (p *Postgres) SetProjectBudget(ctx context.Context, project string, c Caps) (ProjectBudget, error) {
	if !projectName.MatchString(project) {
		return ProjectBudget{}, invalid("project must match %s", projectName)
	}
	for name, v := range map[string]*int64{"max_spend_micro_usd": c.MaxSpend, "max_tokens": c.MaxTokens, "max_wall_ms": c.MaxWallMS, "max_egress_bytes": c.MaxEgress} {
		if v != nil && (*v < 0 || *v > maxReserve) {
			return ProjectBudget{}, invalid("%s must be in [0, %d]", name, int64(maxReserve))
		}
	}
	if err := c.Emergency.check("emergency_reserve"); err != nil {
		return ProjectBudget{}, err
	}
	var out ProjectBudget
	err := p.run(ctx, "set_project_budget", pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, claimLock); err != nil {
			return err
		}
		var held Reserve
		if err := tx.QueryRow(ctx, `SELECT COALESCE(sum(reserve_spend), 0), COALESCE(sum(reserve_tokens), 0), COALESCE(sum(reserve_wall_ms), 0),
				COALESCE(sum(reserve_egress_bytes), 0)
			FROM (SELECT reserve_spend, reserve_tokens, reserve_wall_ms, reserve_egress_bytes FROM tasks WHERE project = $1 AND held FOR UPDATE) h`, project).
			Scan(&held.SpendMicroUSD, &held.Tokens, &held.WallMS, &held.EgressBytes); err != nil {
			return err
		}
		var err error
		out, err = scanBudget(tx.QueryRow(ctx, `INSERT INTO project_budgets (project, max_spend, max_tokens, max_wall_ms,
				emergency_spend, emergency_tokens, emergency_wall_ms, reserved_spend, reserved_tokens, reserved_wall_ms,
				spent_spend, spent_tokens, spent_wall_ms, updated_at, max_egress_bytes, emergency_egress_bytes, reserved_egress_bytes)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, 0, 0, now(), $11, $12, $13)
			ON CONFLICT (project) DO UPDATE SET max_spend = $2, max_tokens = $3, max_wall_ms = $4, emergency_spend = $5,
				emergency_tokens = $6, emergency_wall_ms = $7, max_egress_bytes = $11, emergency_egress_bytes = $12,
				exhausted_at = NULL, updated_at = now()
			RETURNING `+budgetCols, project, c.MaxSpend, c.MaxTokens, c.MaxWallMS, c.Emergency.SpendMicroUSD, c.Emergency.Tokens,
			c.Emergency.WallMS, held.SpendMicroUSD, held.Tokens, held.WallMS, c.MaxEgress, c.Emergency.EgressBytes, held.EgressBytes))
		if err != nil {
			return err
		}
		// Tasks it held back may fit now; the next claim decides.
		_, err = tx.Exec(ctx, `UPDATE tasks SET blocked = NULL WHERE project = $1 AND state = 'queued' AND blocked IS NOT NULL`, project)
		return err
	})
	return out, err
}

// ProjectBudgets lists every project budget.
func (p *Postgres) ProjectBudgets(ctx context.Context) ([]ProjectBudget, error) {
	var out []ProjectBudget
	err := p.query(ctx, "project_budgets", func(tx querier) error {
		rows, err := tx.Query(ctx, `SELECT `+budgetCols+` FROM project_budgets ORDER BY project`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ProjectBudget, error) { return scanBudget(r) })
		return err
	})
	return out, err
}

// hold reserves the claimed task's amounts against its project's budget.
func (m *ttask) hold() error {
	if m.t.held {
		return nil
	}
	if _, err := m.tx.Exec(m.ctx, `UPDATE project_budgets SET reserved_spend = reserved_spend + $2, reserved_tokens = reserved_tokens + $3,
		reserved_wall_ms = reserved_wall_ms + $4, reserved_egress_bytes = reserved_egress_bytes + $5, updated_at = now() WHERE project = $1`,
		m.t.Project, m.t.Reserve.SpendMicroUSD, m.t.Reserve.Tokens, m.t.Reserve.WallMS, m.t.Reserve.EgressBytes); err != nil {
		return err
	}
	m.t.held = true
	return nil
}

// settle ends the task's hold: the reserve is given back and what its
// current episode used since the last settle of that episode — the
// relay's charge, the episode's time, the bytes its egress proxy counted,
// each at most the reserve — is spent. An episode a takeover resumed is
// settled again at its end: its use is cumulative, so only what came
// after the first settle is spent then.
func (m *ttask) settle() error {
	if !m.t.held {
		return nil
	}
	var used Reserve
	if m.t.EpisodeID != nil {
		if err := m.tx.QueryRow(m.ctx, `SELECT COALESCE((SELECT spend FROM relay_budgets WHERE episode_id = $1), 0),
				COALESCE((SELECT tokens FROM relay_budgets WHERE episode_id = $1), 0),
				COALESCE((SELECT (extract(epoch FROM ($2::timestamptz - created_at)) * 1000)::bigint FROM episodes WHERE id = $1), 0),
				COALESCE((SELECT used FROM egress_quota WHERE episode_id = $1), 0)`,
			*m.t.EpisodeID, m.now).Scan(&used.SpendMicroUSD, &used.Tokens, &used.WallMS, &used.EgressBytes); err != nil {
			return err
		}
	}
	done := &m.t.episodeSettled
	used.SpendMicroUSD = min(max(used.SpendMicroUSD-done.SpendMicroUSD, 0), m.t.Reserve.SpendMicroUSD)
	used.Tokens = min(max(used.Tokens-done.Tokens, 0), m.t.Reserve.Tokens)
	used.WallMS = min(max(used.WallMS-done.WallMS, 0), m.t.Reserve.WallMS)
	used.EgressBytes = min(max(used.EgressBytes-done.EgressBytes, 0), m.t.Reserve.EgressBytes)
	done.SpendMicroUSD += used.SpendMicroUSD
	done.Tokens += used.Tokens
	done.WallMS += used.WallMS
	done.EgressBytes += used.EgressBytes
	if _, err := m.tx.Exec(m.ctx, `UPDATE project_budgets SET reserved_spend = reserved_spend - $2, reserved_tokens = reserved_tokens - $3,
		reserved_wall_ms = reserved_wall_ms - $4, spent_spend = spent_spend + $5, spent_tokens = spent_tokens + $6,
		spent_wall_ms = spent_wall_ms + $7, reserved_egress_bytes = reserved_egress_bytes - $8,
		spent_egress_bytes = spent_egress_bytes + $9, updated_at = now() WHERE project = $1`,
		m.t.Project, m.t.Reserve.SpendMicroUSD, m.t.Reserve.Tokens, m.t.Reserve.WallMS, used.SpendMicroUSD, used.Tokens, used.WallMS,
		m.t.Reserve.EgressBytes, used.EgressBytes); err != nil {
		return err
	}
	m.t.Spent.SpendMicroUSD += used.SpendMicroUSD
	m.t.Spent.Tokens += used.Tokens
	m.t.Spent.WallMS += used.WallMS
	m.t.Spent.EgressBytes += used.EgressBytes
	m.t.held = false
	return m.emit("task_reserve_settled", map[string]any{"reserve": m.t.Reserve, "used": used, "episode": m.t.EpisodeID})
}

// markBlocked records, once per task, that a ready task waits because its
// project's budget cannot take its reserve: one task_budget_exhausted
// event and the project's exhausted_at. Called in a claim that found
// nothing to run (it holds the claim lock).
func (p *Postgres) markBlocked(ctx context.Context, tx pgx.Tx, maxClass int) error {
	rows, err := tx.Query(ctx, `SELECT t.id FROM tasks t WHERE t.state = 'queued' AND t.blocked IS NULL AND t.min_class <= $1
		AND `+overBudgetFree+` ORDER BY priority DESC, created_at LIMIT 100`, maxClass, EmergencyPriority)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return err
	}
	for _, id := range ids {
		t, err := scanTask(tx.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		m := &ttask{ctx: ctx, tx: tx, t: t, token: t.token}
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&m.now); err != nil {
			return err
		}
		b, err := scanBudget(tx.QueryRow(ctx, `UPDATE project_budgets SET exhausted_at = COALESCE(exhausted_at, now())
			WHERE project = $1 RETURNING `+budgetCols, t.Project))
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return err
		}
		m.t.Blocked = fmt.Sprintf("budget: project %s cannot take its reserve (spent %+v, reserved %+v)", t.Project, b.Spent, b.Reserved)
		if err := m.emit("task_budget_exhausted", map[string]any{"reserve": t.Reserve, "budget": b,
			"emergency": t.Priority >= EmergencyPriority}); err != nil {
			return err
		}
		if err := m.openTaskAction(m.t.Blocked); err != nil {
			return err
		}
		if err := m.save(); err != nil {
			return err
		}
	}
	return nil
}

// overBudgetFree is overBudget with the emergency priority as $2.
var overBudgetFree = strings.ReplaceAll(overBudget, "$4", "$2")
