-- A job can be cancelled by its service or an operator (POST /v1/jobs/{job_id}/cancel): the job
-- and its tasks gain the state 'cancelled' (next to 'expired' of 0012). Queued tasks are cancelled
-- at once; a running task stops at its worker's next page, whose counts are kept. Retention of both
-- tables is unchanged (0004: finished jobs, cancelled ones included, are pruned after retention_days).
-- 'cancelled' is longer than the 7 characters the state columns had.
ALTER TABLE fanout_job MODIFY state VARCHAR(9) CHARACTER SET ascii NOT NULL DEFAULT 'queued';
ALTER TABLE fanout_task MODIFY state VARCHAR(9) CHARACTER SET ascii NOT NULL DEFAULT 'queued';
ALTER TABLE fanout_job DROP CONSTRAINT ck_job_state;
ALTER TABLE fanout_job ADD CONSTRAINT ck_job_state
  CHECK (state IN ('queued', 'running', 'done', 'failed', 'expired', 'cancelled'));
ALTER TABLE fanout_task DROP CONSTRAINT ck_task_state;
ALTER TABLE fanout_task ADD CONSTRAINT ck_task_state
  CHECK (state IN ('queued', 'running', 'done', 'failed', 'expired', 'cancelled'));
