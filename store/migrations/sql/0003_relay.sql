-- The inference relay's budget and call ledger (issue 13, kernel/relay).
-- relay_budgets holds one episode's limits (from its signed policy) and its
-- charge: what its relays have set aside before forwarding (blocks they
-- admit calls from) plus any usage beyond that, minus what a closing relay
-- gave back. A charge is one UPDATE whose WHERE clause is the limit check,
-- under the episode's row lock, so racing charges cannot both take the last
-- token. A restart keeps the charge, and what a relay held when the kernel
-- died stays charged: a call that may have reached the provider has spent.
CREATE TABLE relay_budgets (
  episode_id  uuid PRIMARY KEY REFERENCES episodes (id),
  max_tokens  bigint NOT NULL CHECK (max_tokens >= 0),
  max_spend   bigint NOT NULL CHECK (max_spend >= 0),   -- micro-USD
  tokens      bigint NOT NULL DEFAULT 0 CHECK (tokens >= 0),
  spend       bigint NOT NULL DEFAULT 0 CHECK (spend >= 0),
  exhausted_at timestamptz
);

-- One row per finished call: what was asked (route, model, request
-- digest), what admission set aside, what the provider reported and what
-- the call was charged. Never prompt or completion text.
CREATE TABLE relay_calls (
  id              uuid PRIMARY KEY,
  episode_id      uuid NOT NULL REFERENCES relay_budgets (episode_id),
  provider        text NOT NULL,
  route           text NOT NULL,
  model           text NOT NULL,
  request_digest  text NOT NULL,
  reserved_tokens bigint NOT NULL CHECK (reserved_tokens >= 0),
  reserved_spend  bigint NOT NULL CHECK (reserved_spend >= 0),
  started_at      timestamptz NOT NULL,
  settled_at      timestamptz,
  status          integer,
  usage_reported  boolean,
  input_tokens    bigint,
  output_tokens   bigint,
  tokens          bigint,
  spend           bigint,
  response_digest text,
  first_byte_ms   bigint,
  duration_ms     bigint
);
CREATE INDEX relay_calls_episode ON relay_calls (episode_id, started_at);
REVOKE ALL ON relay_budgets, relay_calls FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON relay_budgets, relay_calls TO autonomic_kernel;
