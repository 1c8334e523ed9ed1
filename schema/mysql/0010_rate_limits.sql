-- Per-tenant rate limits (docs/API.md "Rate limits"). A limit is a rate (requests per second) with a
-- burst, per (service, class); class: publish (topic publishes) | send (single sends) | write
-- (subscription writes and every other tenant write) | read (GET).

-- The admin's limits (PUT /v1/admin/services/{service}/rate-limits/{class}); a class without a row
-- uses the deployment default (NOTEE_RATE_LIMIT_<CLASS>_RATE / _BURST).
-- retention: lives as long as its service (ON DELETE CASCADE); at most four rows per service.
CREATE TABLE IF NOT EXISTS rate_limit (
  service      VARCHAR(32)  NOT NULL,
  class        VARCHAR(8)   CHARACTER SET ascii NOT NULL,
  rate         DOUBLE       NOT NULL,
  burst        INT          NOT NULL,
  updated_at   DATETIME(6)  NOT NULL,
  -- serves: the per-request bucket update's join, and the admin's get/set of one service
  PRIMARY KEY (service, class),
  CONSTRAINT ck_rate_limit_class CHECK (class IN ('publish', 'send', 'write', 'read')),
  CONSTRAINT ck_rate_limit_values CHECK (rate > 0 AND burst >= 1),
  CONSTRAINT fk_rate_limit_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The buckets, shared by every `notee api` process. GCRA (a token bucket kept as one number): tat is
-- the "theoretical arrival time" in epoch seconds; a request is admitted when
-- max(tat, now) + 1/rate - now <= burst/rate, and then tat = max(tat, now) + 1/rate. One conditional
-- UPDATE per request on the primary key (notee/store/ratelimit_sql.py), times from the database clock.
-- ENGINE=MEMORY because this is request accounting, not data: a durable InnoDB row would cost every
-- request a redo-log flush at commit, with the row lock held through it, which capped one bucket at
-- a few hundred requests/s (measured, docs/API.md); MEMORY statements take microseconds.
-- retention: in memory only — a MariaDB/MySQL restart empties it and every bucket starts full again;
-- one row per (service, class) ever limited (at most four per service).
CREATE TABLE IF NOT EXISTS rate_bucket (
  service      VARCHAR(32)  NOT NULL,
  class        VARCHAR(8)   CHARACTER SET ascii NOT NULL,
  tat          DOUBLE       NOT NULL,
  -- serves: the per-request take (UPDATE ... WHERE service = ? AND class = ?)
  PRIMARY KEY (service, class)
) ENGINE=MEMORY DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
