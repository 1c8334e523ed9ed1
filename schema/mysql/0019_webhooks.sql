-- Delivery webhooks (issue 18 item 4; docs/WEBHOOKS.md). A service registers HTTPS endpoints; events
-- (job.finished, job.failed, token.pruned, dead_letter.created) are written to webhook_delivery, the
-- outbox, in the same transaction as the change that caused them, one row per subscribed endpoint,
-- and `notee webhooks` (the dispatcher) POSTs them signed, retrying with backoff for 24 hours.

-- An endpoint of a service. secret is the HMAC signing secret, Fernet-encrypted under
-- NOTEE_CREDENTIALS_KEY (notee/crypto.py) and shown to the service once, at creation.
-- events: the JSON list of event types it receives.
-- retention: kept until its service deletes it (DELETE /v1/webhooks/{endpoint_id}) or the service is
-- deleted (ON DELETE CASCADE); at most settings.webhook_max_endpoints rows per service.
CREATE TABLE IF NOT EXISTS webhook_endpoint (
  endpoint_id  CHAR(36)      CHARACTER SET ascii NOT NULL,
  service      VARCHAR(32)   NOT NULL,
  url          VARCHAR(2048) NOT NULL,
  events       JSON          NOT NULL,
  description  VARCHAR(200)  NULL,
  secret       VARBINARY(512) NOT NULL,
  created_at   DATETIME(6)   NOT NULL,
  PRIMARY KEY (endpoint_id),
  -- serves: a service's endpoints (GET /v1/webhooks, and the outbox write: which endpoints get an
  -- event); its (service) prefix also serves the foreign key.
  KEY ix_webhook_endpoint_service (service, created_at),
  CONSTRAINT fk_webhook_endpoint_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The outbox: one event for one endpoint. event_id is shared by the rows of one event (one per
-- endpoint) and sent in the body and the Notee-Event-Id header, so a receiver dedupes retries.
-- state: pending (due at next_attempt_at; a claimed row is pending with next_attempt_at = the end of
-- its lease and claim_token set), delivered (a 2xx), failed (gave up: settings.webhook_retry_hours
-- after created_at, or after resent_at once re-sent). A re-send (POST .../deliveries/{id}/resend)
-- makes a row pending again.
-- retention: delivered and failed rows are deleted settings.retention_days after finished_at by
-- `notee prune` / the scheduler's hourly run (notee/retention.py prune_webhook_deliveries); pending
-- rows are kept until they finish (at most webhook_retry_hours); rows go with their endpoint (CASCADE).
CREATE TABLE IF NOT EXISTS webhook_delivery (
  delivery_id     BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  event_id        CHAR(36)     CHARACTER SET ascii NOT NULL,
  endpoint_id     CHAR(36)     CHARACTER SET ascii NOT NULL,
  service         VARCHAR(32)  NOT NULL,
  event_type      VARCHAR(32)  CHARACTER SET ascii NOT NULL,
  payload         JSON         NOT NULL,
  state           VARCHAR(9)   CHARACTER SET ascii NOT NULL DEFAULT 'pending',
  attempts        INT          NOT NULL DEFAULT 0,
  next_attempt_at DATETIME(6)  NOT NULL,
  claim_token     CHAR(32)     CHARACTER SET ascii NULL,
  last_status     INT          NULL,
  last_error      VARCHAR(500) NULL,
  created_at      DATETIME(6)  NOT NULL,
  resent_at       DATETIME(6)  NULL,
  finished_at     DATETIME(6)  NULL,
  PRIMARY KEY (delivery_id),
  -- serves: the dispatcher's claim: pending rows whose next_attempt_at <= now, oldest first
  KEY ix_webhook_delivery_due (state, next_attempt_at),
  -- serves: GET /v1/webhooks/{endpoint_id}/deliveries, newest first (keyset on delivery_id); its
  -- (endpoint_id) prefix also serves the foreign key.
  KEY ix_webhook_delivery_endpoint (endpoint_id, delivery_id),
  -- serves: retention, DELETE ... WHERE finished_at < cutoff in batches
  KEY ix_webhook_delivery_finished (finished_at),
  CONSTRAINT ck_webhook_delivery_state CHECK (state IN ('pending', 'delivered', 'failed')),
  CONSTRAINT ck_webhook_delivery_type
    CHECK (event_type IN ('job.finished', 'job.failed', 'token.pruned', 'dead_letter.created')),
  CONSTRAINT fk_webhook_delivery_endpoint FOREIGN KEY (endpoint_id)
    REFERENCES webhook_endpoint (endpoint_id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
