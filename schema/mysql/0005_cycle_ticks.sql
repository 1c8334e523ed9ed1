-- The cycle scheduler's minute ledger (docs/SCHEDULER.md). One row per (namespace, UTC minute):
-- inserting it is how a scheduler replica claims that minute; a duplicate key means another
-- replica has it. Jobs themselves are made exactly once by fanout_job's idempotency key, so a
-- reclaimed minute (its owner died mid-way) re-creates nothing.
-- namespace separates scheduler deployments that share one database (settings.scheduler_namespace).
-- state: running (claimed, jobs being created) | done (ran in its own minute) | late (ran after a
-- downtime, within settings.scheduler_grace_minutes) | skipped (missed beyond the grace window:
-- recorded, never sent). Times are UTC; claimed_at/finished_at come from the database clock.
-- retention: settings.retention_days (default 14) after minute_utc, deleted by the scheduler itself
-- once an hour (notee/store/ticks.py prune_ticks).
CREATE TABLE IF NOT EXISTS cycle_tick (
  namespace    VARCHAR(64)  CHARACTER SET ascii NOT NULL,
  minute_utc   DATETIME     NOT NULL,
  state        VARCHAR(7)   CHARACTER SET ascii NOT NULL,
  owner        VARCHAR(100) NOT NULL,
  attempts     INT          NOT NULL DEFAULT 1,
  jobs         INT          NOT NULL DEFAULT 0,
  claimed_at   DATETIME(6)  NOT NULL,
  finished_at  DATETIME(6)  NULL,
  -- serves: the claim (insert; duplicate key = taken), the reclaim of a dead owner's minute, the
  -- catch-up read of the grace window and MAX(minute_utc) before it: point/range reads on
  -- (namespace, minute_utc).
  PRIMARY KEY (namespace, minute_utc),
  -- serves: the retention delete of every namespace's old minutes (minute_utc < cutoff LIMIT n)
  KEY ix_tick_minute (minute_utc),
  CONSTRAINT ck_tick_state CHECK (state IN ('running', 'done', 'late', 'skipped')),
  CONSTRAINT ck_tick_minute CHECK (SECOND(minute_utc) = 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
