-- Deliveries that still failed after the bounded retries (or failed permanently): recorded, never
-- silently dropped, so an operator can see why and replay. One row per (message, device).
-- retention: `notee.store.deadletter.prune` deletes rows older than NOTEE_RETENTION_DAYS (14 by
-- default); it runs from the periodic housekeeping (scheduler) and `notee.delivery.prune_dead_letters`.
CREATE TABLE IF NOT EXISTS dead_letter (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  service       VARCHAR(32)  NOT NULL,
  job_id        VARCHAR(64)  CHARACTER SET ascii NULL,
  device_token  VARCHAR(512) CHARACTER SET ascii NOT NULL,
  device_os     VARCHAR(3)   CHARACTER SET ascii NOT NULL,
  provider      VARCHAR(16)  CHARACTER SET ascii NOT NULL,
  reason        VARCHAR(255) NOT NULL,
  attempts      INT          NOT NULL,
  payload       JSON         NOT NULL,
  created_at    DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  -- serves: list a service's dead letters, newest first (operators, replay)
  KEY ix_dead_letter_service (service, created_at),
  -- serves: retention pruning, DELETE ... WHERE created_at < cutoff in batches
  KEY ix_dead_letter_created (created_at),
  CONSTRAINT fk_dead_letter_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
