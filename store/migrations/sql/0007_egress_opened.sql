-- A tunnel's row is written when it opens, before the domain is told it
-- is open (outcome 'opened'), and again when it closes, with its counts:
-- a kernel that dies with tunnels open leaves the rows that say so.
ALTER TABLE egress_fetches DROP CONSTRAINT egress_fetches_outcome_check;
ALTER TABLE egress_fetches ADD CONSTRAINT egress_fetches_outcome_check
  CHECK (outcome IN ('fetched', 'cached', 'refused', 'failed', 'opened'));
