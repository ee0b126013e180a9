-- 0001: the authority store.
--
-- Every table carries the epoch its row was made under. Nothing here is ever
-- deleted by the kernel role: history is evidence.

-- Roles are cluster-wide. Create the kernel role (without login) when this
-- server lacks it so the grants below have a grantee; whoever runs the
-- server decides how it logs in.
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'autonomic_kernel') THEN
    CREATE ROLE autonomic_kernel NOLOGIN;
  END IF;
END $$;

CREATE TABLE episodes (
  id                 uuid PRIMARY KEY,
  spec               jsonb NOT NULL,
  state              text NOT NULL CHECK (state IN ('active', 'completed', 'contained', 'aborted')),
  epoch              bigint NOT NULL CHECK (epoch >= 1),
  policy_version     bigint NOT NULL CHECK (policy_version >= 0),
  current_checkpoint uuid,
  -- Kernel ownership lease: one instance drives an episode at a time.
  owner_instance     text NOT NULL,
  owner_token        bigint NOT NULL CHECK (owner_token >= 1),
  owner_expires_at   timestamptz NOT NULL,
  -- Head of this episode's ledger chain, advanced in the same transaction
  -- as every append, so a truncated tail is detectable.
  ledger_seq         bigint NOT NULL CHECK (ledger_seq >= 0),
  ledger_head        bytea NOT NULL CHECK (length(ledger_head) = 32),
  created_at         timestamptz NOT NULL,
  updated_at         timestamptz NOT NULL
);
-- Every mutation rewrites its episode row (the ledger head); room on the
-- page keeps those updates HOT.
ALTER TABLE episodes SET (fillfactor = 50);

CREATE TABLE epochs (
  episode_id uuid NOT NULL REFERENCES episodes (id),
  epoch      bigint NOT NULL CHECK (epoch >= 1),
  reason     text NOT NULL,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (episode_id, epoch)
);

CREATE TABLE leases (
  id            uuid PRIMARY KEY,
  episode_id    uuid NOT NULL REFERENCES episodes (id),
  epoch         bigint NOT NULL CHECK (epoch >= 1),
  capabilities  jsonb NOT NULL,
  created_at    timestamptz NOT NULL,
  expires_at    timestamptz NOT NULL,
  revoked_at    timestamptz,
  revoke_reason text,
  CHECK ((revoked_at IS NULL) = (revoke_reason IS NULL))
);
CREATE INDEX leases_unrevoked ON leases (episode_id, epoch) WHERE revoked_at IS NULL;

CREATE TABLE domains (
  id         uuid PRIMARY KEY,
  episode_id uuid NOT NULL REFERENCES episodes (id),
  created_at timestamptz NOT NULL
);

CREATE TABLE checkpoints (
  id         uuid PRIMARY KEY,
  episode_id uuid NOT NULL REFERENCES episodes (id),
  domain_id  uuid NOT NULL REFERENCES domains (id),
  generation integer NOT NULL CHECK (generation >= 1),
  epoch      bigint NOT NULL CHECK (epoch >= 1),
  digest     text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
  parent_id  uuid REFERENCES checkpoints (id),
  stable     boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL
);
CREATE INDEX checkpoints_episode ON checkpoints (episode_id, created_at);

ALTER TABLE episodes ADD FOREIGN KEY (current_checkpoint) REFERENCES checkpoints (id);

CREATE TABLE domain_generations (
  domain_id     uuid NOT NULL REFERENCES domains (id),
  generation    integer NOT NULL CHECK (generation >= 1),
  epoch         bigint NOT NULL CHECK (epoch >= 1),
  checkpoint_id uuid REFERENCES checkpoints (id),
  state         text NOT NULL CHECK (state IN ('live', 'destroyed')),
  created_at    timestamptz NOT NULL,
  destroyed_at  timestamptz,
  PRIMARY KEY (domain_id, generation)
);

CREATE TABLE effects (
  id               uuid PRIMARY KEY,
  episode_id       uuid NOT NULL REFERENCES episodes (id),
  lease_id         uuid NOT NULL REFERENCES leases (id),
  kind             text NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_]{0,63}$'),
  class            smallint NOT NULL CHECK (class BETWEEN 2 AND 4),
  state            text NOT NULL CHECK (state IN ('proposed', 'prepared', 'evaluating', 'ready',
                     'commit_intent', 'committing', 'committed',
                     'aborted', 'expired', 'stale', 'commit_unknown', 'failed')),
  revision         integer NOT NULL CHECK (revision >= 1),
  epoch            bigint NOT NULL CHECK (epoch >= 1),
  target_id        text NOT NULL,
  target           jsonb NOT NULL,
  payload_digest   text NOT NULL CHECK (payload_digest ~ '^sha256:[0-9a-f]{64}$'),
  version_vector   jsonb,
  expires_at       timestamptz,
  created_at       timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL,
  commit_intent_at timestamptz,
  outcome_at       timestamptz,
  receipt          jsonb,
  -- commit_intent is written before any adapter acts; every state at or
  -- beyond it must carry the timestamp.
  CHECK (state NOT IN ('commit_intent', 'committing', 'committed', 'commit_unknown')
         OR commit_intent_at IS NOT NULL)
);
-- No index mentions state: an effect changes state six times on its way
-- to committed, and an index on (or a partial index over) state would make
-- every one of those updates non-HOT. Epoch fencing and reconciliation find
-- effects by episode.
CREATE INDEX effects_episode ON effects (episode_id, epoch);
ALTER TABLE effects SET (fillfactor = 80);

CREATE TABLE effect_revisions (
  effect_id      uuid NOT NULL REFERENCES effects (id),
  revision       integer NOT NULL CHECK (revision >= 1),
  epoch          bigint NOT NULL CHECK (epoch >= 1),
  target         jsonb NOT NULL,
  payload_digest text NOT NULL,
  version_vector jsonb,
  created_at     timestamptz NOT NULL,
  PRIMARY KEY (effect_id, revision)
);

CREATE TABLE decisions (
  id         uuid PRIMARY KEY,
  effect_id  uuid NOT NULL,
  revision   integer NOT NULL,
  epoch      bigint NOT NULL CHECK (epoch >= 1),
  kind       text NOT NULL CHECK (kind IN ('semantic', 'verification', 'human')),
  verdict    text NOT NULL CHECK (verdict IN ('allow', 'deny')),
  body       jsonb NOT NULL,
  key_id     text,
  signature  bytea,
  created_at timestamptz NOT NULL,
  FOREIGN KEY (effect_id, revision) REFERENCES effect_revisions (effect_id, revision),
  CHECK ((key_id IS NULL) = (signature IS NULL))
);
CREATE INDEX decisions_binding ON decisions (effect_id, revision, epoch);

CREATE TABLE recovery_lineage (
  id            uuid PRIMARY KEY,
  episode_id    uuid NOT NULL REFERENCES episodes (id),
  from_epoch    bigint NOT NULL CHECK (from_epoch >= 1),
  to_epoch      bigint NOT NULL CHECK (to_epoch = from_epoch + 1),
  checkpoint_id uuid REFERENCES checkpoints (id),
  reason        text NOT NULL,
  created_at    timestamptz NOT NULL
);

-- The ledger. body is the event's canonical JSON (RFC 8785) exactly as it
-- was hashed; hash = SHA-256 over the canonical envelope of all columns
-- (see store/ledger).
--
-- No foreign key to episodes: every append happens under that episode's row
-- lock in the same transaction, so the row is known to exist, and a foreign
-- key would add a lookup and a lock to every single mutation.
CREATE TABLE events (
  episode_id uuid NOT NULL,
  seq        bigint NOT NULL CHECK (seq >= 1),
  epoch      bigint NOT NULL CHECK (epoch >= 1),
  kind       text NOT NULL,
  body       text NOT NULL,
  at         timestamptz NOT NULL,
  prev_hash  bytea NOT NULL CHECK (length(prev_hash) = 32),
  hash       bytea NOT NULL CHECK (length(hash) = 32),
  PRIMARY KEY (episode_id, seq)
);

-- Append-only for everyone but a superuser who deliberately disables
-- triggers; the grants below additionally keep the kernel role from even
-- trying. Two independent barriers, because a ledger that the writer can
-- rewrite is not evidence.
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the event ledger is append-only' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER events_no_update_delete BEFORE UPDATE OR DELETE ON events
  FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
  FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();

REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON episodes, leases, checkpoints, domain_generations,
  effects, effect_revisions TO autonomic_kernel;
GRANT SELECT, INSERT ON epochs, domains, decisions, recovery_lineage, events TO autonomic_kernel;
GRANT SELECT ON schema_migrations TO autonomic_kernel;
