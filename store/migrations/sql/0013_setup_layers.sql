-- Setup layers (issue 24 §2): what a target's setup command left in the
-- workspace, kept as a checkpoint archive and reused by every episode whose
-- key — the target's repository, the environment (rootfs) it ran on, the
-- setup argv, the egress grant and the lockfiles' blobs at the base — is
-- the same. The archive is replicated like a stable checkpoint (pruning
-- spares it while its row exists); used_at orders eviction, least recently
-- used first. rootfs_digest is the environment the layer was made on: a
-- launcher whose rootfs of that name differs makes a new one.
CREATE TABLE setup_layers (
  key           text PRIMARY KEY CHECK (key ~ '^[0-9a-f]{64}$'),
  digest        text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
  rootfs_digest text NOT NULL,
  target        text NOT NULL,
  inputs        jsonb NOT NULL,
  bytes         bigint NOT NULL CHECK (bytes >= 0),
  created_at    timestamptz NOT NULL DEFAULT now(),
  used_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX setup_layers_digest ON setup_layers (digest);
GRANT SELECT, INSERT, UPDATE, DELETE ON setup_layers TO autonomic_kernel;
