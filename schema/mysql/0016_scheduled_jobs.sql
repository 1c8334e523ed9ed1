-- Scheduled publishes and single sends (issue 18 item 1): a job may carry send_at (UTC, an absolute
-- instant) and waits in the new state 'scheduled' until then. Its task rows are inserted with
-- lease_until = send_at, so the one claim query (state IN ('queued','running') AND lease_until <= the
-- database clock, ix_task_claim) hands each task to exactly one worker, no earlier than send_at.
-- A scheduled single send is a job of target_kind 'USER' ({"user_id": ...}) with one task.
-- Retention of both tables is unchanged (0004: finished jobs are pruned after retention_days; a
-- scheduled job is unfinished, so it is kept until it runs or is cancelled).
ALTER TABLE fanout_job ADD COLUMN IF NOT EXISTS send_at DATETIME(6) NULL AFTER deadline;
ALTER TABLE fanout_job DROP CONSTRAINT ck_job_state;
ALTER TABLE fanout_job ADD CONSTRAINT ck_job_state
  CHECK (state IN ('scheduled', 'queued', 'running', 'done', 'failed', 'expired', 'cancelled'));
ALTER TABLE fanout_job DROP CONSTRAINT ck_job_target_kind;
ALTER TABLE fanout_job ADD CONSTRAINT ck_job_target_kind CHECK (target_kind IN ('TOPIC', 'CYCLE', 'USER'));
