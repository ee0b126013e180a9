-- Pruning replicas asks whether any checkpoint names an archive's digest
-- (one no checkpoint names yet is in flight: replicated, not yet recorded).
CREATE INDEX checkpoints_digest ON checkpoints (digest);
