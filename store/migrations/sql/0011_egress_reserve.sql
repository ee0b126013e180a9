-- Egress bytes reserved at admission (issue 25 §3): a task reserves its
-- episode's egress byte cap (the smaller of its policy's egress.max_bytes
-- and the operator's max_bytes_per_episode; 0 without an egress grant)
-- against its project's cap, and settles to what its episode's proxy
-- counted (egress_quota.used), as for spend, tokens and wall time.
ALTER TABLE tasks
  ADD COLUMN reserve_egress_bytes bigint NOT NULL DEFAULT 0 CHECK (reserve_egress_bytes >= 0),
  ADD COLUMN spent_egress_bytes   bigint NOT NULL DEFAULT 0 CHECK (spent_egress_bytes >= 0),
  -- What settles already spent of the current episode's use: a takeover
  -- that resumes the episode settles again, and only what came since.
  ADD COLUMN episode_settled      jsonb NOT NULL DEFAULT '{}';
ALTER TABLE project_budgets
  ADD COLUMN max_egress_bytes       bigint CHECK (max_egress_bytes >= 0),
  ADD COLUMN emergency_egress_bytes bigint NOT NULL DEFAULT 0 CHECK (emergency_egress_bytes >= 0),
  ADD COLUMN reserved_egress_bytes  bigint NOT NULL DEFAULT 0 CHECK (reserved_egress_bytes >= 0),
  ADD COLUMN spent_egress_bytes     bigint NOT NULL DEFAULT 0 CHECK (spent_egress_bytes >= 0);
