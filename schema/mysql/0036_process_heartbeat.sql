-- Issue 33: each Notee process (api, worker, scheduler, webhooks) says it is alive here every few
-- seconds, so one page (the console's health page, `GET /v1/admin/processes`) sees every process of
-- the deployment, though they run apart. process_id is host:pid:random (the worker's lease owner,
-- for a worker), unique per process start. breakers is the worker's circuit breaker per provider
-- ({"fcm": "closed", "apns": "open", "webpush": "half_open"}), NULL for the other kinds. A process that
-- stops gracefully deletes its row; a killed one stops beating and its row turns stale (3 missed beats of
-- interval_s, the writer's own NOTEE_PROCESS_HEARTBEAT_S, and 5 s).
-- retention: deleted by the hourly retention run (notee/usecases/retention.py, `notee prune`) once
-- beat_at is more than 1 hour old (a killed process stays visible as stale until then).
CREATE TABLE IF NOT EXISTS process_heartbeat (
  process_id  VARCHAR(150) NOT NULL,
  kind        VARCHAR(9)   CHARACTER SET ascii NOT NULL,
  version     VARCHAR(40)  NOT NULL,
  started_at  DATETIME(6)  NOT NULL,
  beat_at     DATETIME(6)  NOT NULL,
  interval_s  FLOAT        NOT NULL,
  breakers    JSON         NULL,
  -- serves: a process's beat (an upsert of its own row) and its delete at a graceful stop
  PRIMARY KEY (process_id),
  -- serves: retention: delete the rows whose last beat is older than 1 hour
  KEY ix_process_heartbeat_beat (beat_at),
  CONSTRAINT ck_process_heartbeat_kind CHECK (kind IN ('api', 'worker', 'scheduler', 'webhooks'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
