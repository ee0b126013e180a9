-- 0004 (not 0003): 0003 is the relay ledger (issue 13), merged first.
-- The egress proxy's fetch ledger and byte counter (issue 14).
--
-- egress_fetches records every request a domain made through its egress
-- proxy, admitted or refused, without content: the host, the path (plain
-- HTTP only: a tunnel's path is encrypted and never seen), the status, the
-- bytes delivered into the domain, the SHA-256 of a plain-HTTP body, and
-- how long it took. Rows are never updated or deleted.
--
-- egress_quota is each episode's byte counter. The proxy reserves bytes
-- before it delivers them, with one conditional upsert that the row lock
-- serialises: two racing fetches of one episode cannot both take the last
-- byte, and a kernel restart keeps what was spent.
CREATE TABLE egress_fetches (
  id          bigserial PRIMARY KEY,
  episode_id  uuid NOT NULL REFERENCES episodes (id),
  kind        text NOT NULL CHECK (kind IN ('http', 'tunnel')),
  method      text NOT NULL CHECK (length(method) <= 16),
  host        text NOT NULL CHECK (length(host) <= 255),
  path        text NOT NULL CHECK (length(path) <= 4096),
  outcome     text NOT NULL CHECK (outcome IN ('fetched', 'cached', 'refused', 'failed')),
  code        text NOT NULL CHECK (length(code) <= 64),
  reason      text NOT NULL CHECK (length(reason) <= 512),
  status      integer NOT NULL CHECK (status >= 0 AND status < 1000),
  bytes       bigint NOT NULL CHECK (bytes >= 0),
  bytes_up    bigint NOT NULL CHECK (bytes_up >= 0),
  sha256      text NOT NULL CHECK (sha256 = '' OR sha256 ~ '^[0-9a-f]{64}$'),
  duration_ms bigint NOT NULL CHECK (duration_ms >= 0),
  at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX egress_fetches_episode ON egress_fetches (episode_id, id);

CREATE TABLE egress_quota (
  episode_id uuid PRIMARY KEY REFERENCES episodes (id),
  used       bigint NOT NULL CHECK (used >= 0)
);

REVOKE ALL ON egress_fetches, egress_quota FROM PUBLIC;
REVOKE ALL ON SEQUENCE egress_fetches_id_seq FROM PUBLIC;
GRANT SELECT, INSERT ON egress_fetches TO autonomic_kernel;
GRANT USAGE ON SEQUENCE egress_fetches_id_seq TO autonomic_kernel;
GRANT SELECT, INSERT, UPDATE ON egress_quota TO autonomic_kernel;
