-- Fan-out work queue: a publish job and its tasks (one per slot range), leased by `notee worker`
-- processes with SELECT ... FOR UPDATE SKIP LOCKED (docs/FANOUT.md). The job row and its task rows
-- are inserted in one transaction. Times are UTC DATETIME(6) taken from the database clock, so
-- leases do not depend on the workers' clocks.

-- A publish: what to send (rendered payload snapshot) to whom (template key + target).
-- target is {"topic": ...} or {"timezone", "day", "hour", "minute"}; payload is the rendered
-- {title, body, data, ttl_seconds, priority} the workers send. idempotency_key is the client's
-- Idempotency-Key header (or the scheduler's tick key): the same key returns the same job.
-- retention: max(settings.retention_days, settings.receipts_retention_days) (default 30: a job lives as
-- long as its receipts) after finished_at, deleted by the hourly retention run and `notee prune`
-- (notee/usecases/retention.py job_retention_days); an unfinished job is kept until it finishes. Tasks cascade.
CREATE TABLE IF NOT EXISTS fanout_job (
  job_id               CHAR(36)     CHARACTER SET ascii NOT NULL,
  service              VARCHAR(32)  NOT NULL,
  notification_key     CHAR(36)     CHARACTER SET ascii NOT NULL,
  notification_method  VARCHAR(6)   CHARACTER SET ascii NOT NULL,
  notification_type    VARCHAR(64)  NOT NULL,
  target_kind          VARCHAR(5)   CHARACTER SET ascii NOT NULL,
  target               JSON         NOT NULL,
  idempotency_key      VARCHAR(200) NULL,
  variables            JSON         NULL,
  overrides            JSON         NULL,
  payload              JSON         NOT NULL,
  state                VARCHAR(7)   CHARACTER SET ascii NOT NULL DEFAULT 'queued',
  task_count           INT          NOT NULL,
  error                VARCHAR(500) NULL,
  created_at           DATETIME(6)  NOT NULL,
  started_at           DATETIME(6)  NULL,
  finished_at          DATETIME(6)  NULL,
  PRIMARY KEY (job_id),
  -- serves: idempotent publish: find the job a (service, Idempotency-Key) already created; NULL keys
  -- never collide. Its (service) prefix also serves the foreign key.
  UNIQUE KEY uq_job_idempotency (service, idempotency_key),
  -- serves: `notee prune`: finished jobs older than the retention window
  KEY ix_job_finished (finished_at),
  CONSTRAINT ck_job_method CHECK (notification_method IN ('TOPIC', 'CYCLE', 'SINGLE')),
  CONSTRAINT ck_job_target_kind CHECK (target_kind IN ('TOPIC', 'CYCLE')),
  CONSTRAINT ck_job_state CHECK (state IN ('queued', 'running', 'done', 'failed')),
  CONSTRAINT fk_job_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One slot range of a job: the unit a worker leases. Open tasks are 'queued' (claimable when
-- lease_until <= now) or 'running' (leased until lease_until; an expired lease is reclaimable).
-- lease_token fences a claim: every write by a worker names its token, so a worker whose lease was
-- taken over cannot overwrite the new owner's progress. paging_state is the Cassandra paging state
-- after the last checkpointed page of current_slot; it never leaves the workers.
-- retention: lives as long as its job (ON DELETE CASCADE from fanout_job).
CREATE TABLE IF NOT EXISTS fanout_task (
  job_id        CHAR(36)     CHARACTER SET ascii NOT NULL,
  task_no       INT          NOT NULL,
  slot_from     INT          NOT NULL,
  slot_to       INT          NOT NULL,
  current_slot  INT          NOT NULL,
  paging_state  BLOB         NULL,
  state         VARCHAR(7)   CHARACTER SET ascii NOT NULL DEFAULT 'queued',
  lease_owner   VARCHAR(100) NULL,
  lease_token   CHAR(32)     CHARACTER SET ascii NULL,
  lease_until   DATETIME(6)  NOT NULL,
  attempts      INT          NOT NULL DEFAULT 0,
  targeted      BIGINT       NOT NULL DEFAULT 0,
  sent          BIGINT       NOT NULL DEFAULT 0,
  failed        BIGINT       NOT NULL DEFAULT 0,
  pruned        BIGINT       NOT NULL DEFAULT 0,
  retried       BIGINT       NOT NULL DEFAULT 0,
  pages         INT          NOT NULL DEFAULT 0,
  error         VARCHAR(500) NULL,
  started_at    DATETIME(6)  NULL,
  finished_at   DATETIME(6)  NULL,
  PRIMARY KEY (job_id, task_no),
  -- serves: the claim: open tasks (state IN ('queued','running')) whose lease_until <= now
  KEY ix_task_claim (state, lease_until),
  CONSTRAINT ck_task_state CHECK (state IN ('queued', 'running', 'done', 'failed')),
  CONSTRAINT ck_task_slots CHECK (slot_from <= slot_to AND current_slot BETWEEN slot_from AND slot_to),
  CONSTRAINT fk_task_job FOREIGN KEY (job_id) REFERENCES fanout_job (job_id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
