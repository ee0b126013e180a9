-- Actions (issue 25 §2): a human decision the kernel waits on, bound to
-- one exact operation — the effect, its revision, epoch, payload digest,
-- kind and target as they stood when it was opened. One per effect
-- revision and epoch; resolved once (dedup_key is unique, so a replayed
-- or second approval records nothing more).
CREATE TABLE actions (
  id             uuid PRIMARY KEY,
  episode_id     uuid NOT NULL REFERENCES episodes (id),
  effect_id      uuid NOT NULL REFERENCES effects (id),
  revision       integer NOT NULL CHECK (revision >= 1),
  epoch          bigint NOT NULL CHECK (epoch >= 1),
  payload_digest text NOT NULL CHECK (payload_digest ~ '^sha256:[0-9a-f]{64}$'),
  kind           text NOT NULL,
  target_id      text NOT NULL,
  target         jsonb NOT NULL,
  reason         text NOT NULL,
  priority       integer NOT NULL,
  state          text NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'dismissed', 'superseded')),
  snoozed_until  timestamptz,
  feedback       text,
  dedup_key      text UNIQUE,
  decision_id    uuid REFERENCES decisions (id),
  created_at     timestamptz NOT NULL,
  resolved_at    timestamptz,
  UNIQUE (effect_id, revision, epoch),
  CHECK ((state = 'pending') = (resolved_at IS NULL))
);
CREATE INDEX actions_open ON actions (priority DESC, created_at) WHERE state = 'pending';
CREATE INDEX actions_episode ON actions (episode_id);
REVOKE ALL ON actions FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON actions TO autonomic_kernel;
