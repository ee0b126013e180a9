-- Evicted setup layers (issue 24 §2 across hosts): every kernel that
-- imported a layer holds its archive in its own launcher store, and only
-- the kernel that evicts the row learns of it. Each eviction (or a
-- replacement under the same key) leaves a tombstone here, in the same
-- transaction; every kernel releases its holds on the tombstoned archives
-- it may have imported. A layer recorded again under the same key and
-- digest clears its tombstone. Tombstones older than 7 days are pruned.
CREATE TABLE setup_layer_tombstones (
  key        text NOT NULL CHECK (key ~ '^[0-9a-f]{64}$'),
  digest     text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
  evicted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (key, digest)
);
CREATE INDEX setup_layer_tombstones_evicted_at ON setup_layer_tombstones (evicted_at);
GRANT SELECT, INSERT, UPDATE, DELETE ON setup_layer_tombstones TO autonomic_kernel;
