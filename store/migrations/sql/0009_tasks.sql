-- Tasks (issue 25 §1): the durable queue every kernel of one database
-- shares. A task is an episode spec waiting for a kernel, with its project,
-- priority and the autonomy class it needs. A kernel claims one under a
-- claim lease (instance, process, token; expiry on the database's clock);
-- once its episode runs, the episode's own ownership lease says whether
-- its kernel lives, and a task whose episode's owner is gone goes back to
-- the queue for takeover. Every change appends to the task's own
-- hash-chained ledger (task_events) in the same transaction.
CREATE TABLE tasks (
  id               uuid PRIMARY KEY,
  project          text NOT NULL CHECK (project ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
  priority         integer NOT NULL CHECK (priority BETWEEN -1000 AND 1000),
  min_class        integer NOT NULL CHECK (min_class BETWEEN 0 AND 4),
  submitter        text NOT NULL,
  spec             jsonb NOT NULL,
  spec_digest      text NOT NULL CHECK (spec_digest ~ '^sha256:[0-9a-f]{64}$'),
  state            text NOT NULL CHECK (state IN ('queued', 'claimed', 'running', 'ended', 'cancelled', 'failed')),
  claim_instance   text,
  claim_process    uuid,
  claim_token      bigint NOT NULL CHECK (claim_token >= 0),
  claim_expires_at timestamptz,
  episode_id       uuid REFERENCES episodes (id),
  episodes         uuid[] NOT NULL,
  attempts         integer NOT NULL CHECK (attempts >= 0),
  takeovers        integer NOT NULL CHECK (takeovers >= 0),
  cancel_requested boolean NOT NULL,
  -- What the task reserves at admission (its episode's hard caps: the
  -- policy's inference budget and the wall time), held against its
  -- project's budget while it is claimed or running; spent_* is what its
  -- episodes used, settled when a claim ends.
  reserve_spend    bigint NOT NULL CHECK (reserve_spend >= 0),
  reserve_tokens   bigint NOT NULL CHECK (reserve_tokens >= 0),
  reserve_wall_ms  bigint NOT NULL CHECK (reserve_wall_ms >= 0),
  held             boolean NOT NULL,
  spent_spend      bigint NOT NULL CHECK (spent_spend >= 0),
  spent_tokens     bigint NOT NULL CHECK (spent_tokens >= 0),
  spent_wall_ms    bigint NOT NULL CHECK (spent_wall_ms >= 0),
  blocked          text,
  -- An operator granted this task its project's emergency reserve, once
  -- (its budget Action approved): its next claim may draw on it.
  emergency_granted boolean NOT NULL DEFAULT false,
  outcome          text,
  reason           text,
  ledger_seq       bigint NOT NULL CHECK (ledger_seq >= 0),
  ledger_head      bytea NOT NULL CHECK (length(ledger_head) = 32),
  created_at       timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL,
  ended_at         timestamptz,
  CHECK ((state IN ('ended', 'cancelled', 'failed')) = (ended_at IS NOT NULL)),
  CHECK ((state IN ('claimed', 'running')) = (claim_expires_at IS NOT NULL))
);
CREATE INDEX tasks_ready ON tasks (priority DESC, created_at, id) WHERE state = 'queued';
CREATE INDEX tasks_active ON tasks (project) WHERE state IN ('claimed', 'running');
CREATE INDEX tasks_episode ON tasks (episode_id) WHERE episode_id IS NOT NULL;
CREATE INDEX tasks_created ON tasks (created_at DESC, id);

-- A project's hard caps (NULL: none) with a named emergency reserve only
-- tasks of emergency priority may draw on; reserved_* is held by its
-- claimed and running tasks, spent_* settled by its ended claims. A claim
-- admits a task only when spent + reserved + its reserve stays within the
-- cap (less the emergency reserve), in the claim's transaction.
CREATE TABLE project_budgets (
  project         text PRIMARY KEY CHECK (project ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
  max_spend       bigint CHECK (max_spend >= 0),
  max_tokens      bigint CHECK (max_tokens >= 0),
  max_wall_ms     bigint CHECK (max_wall_ms >= 0),
  emergency_spend   bigint NOT NULL CHECK (emergency_spend >= 0),
  emergency_tokens  bigint NOT NULL CHECK (emergency_tokens >= 0),
  emergency_wall_ms bigint NOT NULL CHECK (emergency_wall_ms >= 0),
  reserved_spend  bigint NOT NULL CHECK (reserved_spend >= 0),
  reserved_tokens bigint NOT NULL CHECK (reserved_tokens >= 0),
  reserved_wall_ms bigint NOT NULL CHECK (reserved_wall_ms >= 0),
  spent_spend     bigint NOT NULL CHECK (spent_spend >= 0),
  spent_tokens    bigint NOT NULL CHECK (spent_tokens >= 0),
  spent_wall_ms   bigint NOT NULL CHECK (spent_wall_ms >= 0),
  exhausted_at    timestamptz,
  updated_at      timestamptz NOT NULL
);

-- An Action may name a task instead of an effect: a queued task its
-- project's budget holds back waits on an operator (approve: the task may
-- draw on the emergency reserve, once; deny: it is cancelled). Its exact
-- operation is the task, its spec digest (payload_digest), its project
-- (target_id) and its reserve (target).
ALTER TABLE actions ADD COLUMN task_id uuid REFERENCES tasks (id);
ALTER TABLE actions ALTER COLUMN episode_id DROP NOT NULL, ALTER COLUMN effect_id DROP NOT NULL,
  ALTER COLUMN revision DROP NOT NULL, ALTER COLUMN epoch DROP NOT NULL;
ALTER TABLE actions ADD CHECK ((effect_id IS NULL) <> (task_id IS NULL));
ALTER TABLE actions ADD CHECK (task_id IS NOT NULL OR (episode_id IS NOT NULL AND revision IS NOT NULL AND epoch IS NOT NULL));
CREATE UNIQUE INDEX actions_task_pending ON actions (task_id) WHERE task_id IS NOT NULL AND state = 'pending';

-- Each task's ledger, hashed like the episodes' (store/ledger), append-only
-- by trigger and by grant.
CREATE TABLE task_events (
  task_id    uuid NOT NULL REFERENCES tasks (id),
  seq        bigint NOT NULL CHECK (seq >= 1),
  epoch      bigint NOT NULL CHECK (epoch >= 1),
  kind       text NOT NULL,
  body       text NOT NULL,
  at         timestamptz NOT NULL,
  prev_hash  bytea NOT NULL CHECK (length(prev_hash) = 32),
  hash       bytea NOT NULL CHECK (length(hash) = 32),
  PRIMARY KEY (task_id, seq)
);
CREATE TRIGGER task_events_no_update_delete BEFORE UPDATE OR DELETE ON task_events
  FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER task_events_no_truncate BEFORE TRUNCATE ON task_events
  FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();

REVOKE ALL ON tasks, task_events, project_budgets FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON tasks, project_budgets TO autonomic_kernel;
GRANT SELECT, INSERT ON task_events TO autonomic_kernel;
