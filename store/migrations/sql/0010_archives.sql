-- Checkpoint archives replicated to the database (issue 25 §1): every
-- kernel of one database can restore the stable checkpoint of an episode
-- whose host was lost. An archive is named by the SHA-256 of its bytes,
-- kept as ordered chunks, and written in one transaction with its header,
-- so a reader sees all of it or none. Only the newest stable checkpoint of
-- an active episode is kept (PruneArchives); the launcher verifies the
-- digest again before it restores a byte.
CREATE TABLE checkpoint_archives (
  digest     text PRIMARY KEY CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
  bytes      bigint NOT NULL CHECK (bytes >= 0),
  chunks     integer NOT NULL CHECK (chunks >= 0),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE checkpoint_archive_chunks (
  digest text NOT NULL REFERENCES checkpoint_archives (digest) ON DELETE CASCADE,
  seq    integer NOT NULL CHECK (seq >= 0),
  data   bytea NOT NULL CHECK (length(data) BETWEEN 1 AND 1048576),
  PRIMARY KEY (digest, seq)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON checkpoint_archives, checkpoint_archive_chunks TO autonomic_kernel;
