-- Issue 30: an immediate single send (POST /v1/users/{user_id}/send without send_at) honours
-- Idempotency-Key. The first request with a key claims it here (state 'sending') before it sends;
-- when it has its answer, the answer is kept (state 'done': status and body), and every request with
-- the same key within 24 hours gets that answer and sends nothing. request_hash is the sha256 of what
-- the first request asked (user, type, variables, data, quiet_hours): the same key with another
-- request is 422, as for publishes. A request that failed (an error answer) gives its key back.
-- idempotency_key is the stored form, `client:<key>`, as on fanout_job.
-- retention: 24 hours after created_at; then the hourly retention run deletes the row (notee/usecases/
-- retention.py, `notee prune`), and its key may be used again. A deleted service takes its rows.
CREATE TABLE IF NOT EXISTS send_idempotency (
  service          VARCHAR(32)  NOT NULL,
  idempotency_key  VARCHAR(255) NOT NULL,
  request_hash     CHAR(64)     CHARACTER SET ascii NOT NULL,
  state            VARCHAR(8)   CHARACTER SET ascii NOT NULL,
  status_code      SMALLINT     NULL,
  answer           JSON         NULL,
  created_at       DATETIME(6)  NOT NULL,
  finished_at      DATETIME(6)  NULL,
  -- serves: a request's claim and lookup of its key (one per single send that carries a key)
  PRIMARY KEY (service, idempotency_key),
  -- serves: retention: delete the rows older than 24 hours
  KEY ix_send_idempotency_created (created_at),
  CONSTRAINT ck_send_idempotency_state CHECK (state IN ('sending', 'done')),
  CONSTRAINT fk_send_idempotency_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
