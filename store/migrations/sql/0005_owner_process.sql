-- The ownership lease names the kernel process that holds it, not only its
-- instance id: two processes with one InstanceID (an overlapping restart)
-- would otherwise both pass the owner check. Each store handle draws a
-- random, time-ordered UUIDv7 when it opens; the lease records the one
-- that took it, every mutation compares it, and a newer process of the
-- same instance takes the lease over at once, fencing the older. NULL: a
-- lease taken before this migration, which any process of its instance
-- may take over.
ALTER TABLE episodes ADD COLUMN owner_process uuid;
