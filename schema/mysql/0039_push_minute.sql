-- Issue 33: pushes per minute, for the console's charts of a job and of a service (the last hour) and a
-- job's per-page timeline. The fan-out worker adds each page's counts to its task's row of the minute,
-- in the transaction that checkpoints (or completes) the page, so the series and the task's counts
-- never disagree. One row per (job, minute, task): each task has one lease owner at a time, so two
-- lanes never wait on the same row. No foreign keys: the write is on every page's path, and the rows
-- live 2 days, far less than their jobs (a finished job is kept max(retention_days,
-- receipts_retention_days) days: 30 by default, notee/usecases/retention.py job_retention_days), so a
-- job older than 2 days keeps its counts but no longer has its per-minute series; a service deleted
-- meanwhile leaves rows nobody can read (every read names the service) until the retention run.
-- retention: 2 days after minute_utc, deleted by the hourly retention run (notee/usecases/retention.py,
-- `notee prune`).
CREATE TABLE IF NOT EXISTS push_minute (
  job_id      CHAR(36)     CHARACTER SET ascii NOT NULL,
  minute_utc  DATETIME     NOT NULL,
  task_no     INT          NOT NULL,
  service     VARCHAR(32)  NOT NULL,
  pages       INT          NOT NULL DEFAULT 0,
  targeted    BIGINT       NOT NULL DEFAULT 0,
  sent        BIGINT       NOT NULL DEFAULT 0,
  failed      BIGINT       NOT NULL DEFAULT 0,
  pruned      BIGINT       NOT NULL DEFAULT 0,
  first_at    DATETIME(6)  NOT NULL,
  last_at     DATETIME(6)  NOT NULL,
  -- serves: a page's upsert; a job's pushes per minute and its timeline (WHERE job_id = ? ORDER BY minute_utc)
  PRIMARY KEY (job_id, minute_utc, task_no),
  -- serves: a service's pushes per minute of the last hour (WHERE service = ? AND minute_utc >= ?)
  KEY ix_push_minute_service (service, minute_utc),
  -- serves: retention: delete the rows older than 2 days
  KEY ix_push_minute_minute (minute_utc)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
