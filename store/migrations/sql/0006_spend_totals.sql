-- An episode's spend totals, kept as its effect_spend rows are written, so
-- that a commit reads two numbers under the episode's lock instead of
-- summing every row the episode ever wrote: the sum made every commit
-- slower than the one before it. The per-minute rate still counts rows,
-- but only the last minute's, through effect_spend_episode (episode_id, at).
--
-- Only the trigger writes the totals, in the transaction that writes the
-- row, under the same episode lock. The kernel role may read them and
-- nothing else: as effect_spend is insert-only for it, a kernel account
-- can raise an episode's spend, never lower it.
CREATE TABLE episode_spend (
  episode_id uuid PRIMARY KEY REFERENCES episodes (id),
  bytes      bigint NOT NULL CHECK (bytes >= 0),
  effects    bigint NOT NULL CHECK (effects >= 0)
);
INSERT INTO episode_spend (episode_id, bytes, effects)
  SELECT episode_id, sum(bytes), count(*) FROM effect_spend GROUP BY episode_id;

CREATE FUNCTION effect_spend_total() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  INSERT INTO public.episode_spend AS t (episode_id, bytes, effects) VALUES (NEW.episode_id, NEW.bytes, 1)
    ON CONFLICT (episode_id) DO UPDATE SET bytes = t.bytes + EXCLUDED.bytes, effects = t.effects + 1;
  RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION effect_spend_total() FROM PUBLIC;
CREATE TRIGGER effect_spend_total AFTER INSERT ON effect_spend
  FOR EACH ROW EXECUTE FUNCTION effect_spend_total();

REVOKE ALL ON episode_spend FROM PUBLIC;
GRANT SELECT ON episode_spend TO autonomic_kernel;
