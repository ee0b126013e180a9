-- Effects outside the lease (issue 25 §2): under a kernel that asks rather
-- than refuses (escalate_outside_lease), a proposal the episode's lease
-- does not grant is recorded with outside_lease naming what the lease
-- lacks. It waits on a human like a class 4 effect — its Action names it
-- exactly — and only that approved Action lifts the grant, for that one
-- revision; the lease's paths, bytes and ceiling still hold.
ALTER TABLE effects ADD COLUMN outside_lease text
  CHECK (outside_lease IS NULL OR length(outside_lease) BETWEEN 1 AND 512);
