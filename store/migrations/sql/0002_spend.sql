-- Durable budget counters (issue 12 §1). One row per effect that reached
-- commit_intent, written in BeginCommit's own transaction under the
-- episode's row lock: two racing commits of one episode are serialised,
-- and the second sees the first's spend before it decides, so they cannot
-- both spend the last byte. bytes_total is the sum of bytes; the per-minute
-- rate counts rows by the database's clock. Rows are never updated or
-- deleted: an attempt that may have acted has spent.
CREATE TABLE effect_spend (
  effect_id  uuid PRIMARY KEY REFERENCES effects (id),
  episode_id uuid NOT NULL REFERENCES episodes (id),
  lease_id   uuid NOT NULL REFERENCES leases (id),
  bytes      bigint NOT NULL CHECK (bytes >= 0),
  at         timestamptz NOT NULL
);
CREATE INDEX effect_spend_episode ON effect_spend (episode_id, at);
REVOKE ALL ON effect_spend FROM PUBLIC;
GRANT SELECT, INSERT ON effect_spend TO autonomic_kernel;
