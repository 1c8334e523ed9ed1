-- A job may carry a deadline (database clock): a cycle job's minute + the scheduler's grace. A task
-- claimed after it is not run but recorded 'expired' (with the job: nothing of it is sent hours late).
-- Publish jobs have none (NULL). The state columns gain 'expired'; the retention of both tables is
-- unchanged (0004: jobs finished more than retention_days ago are pruned, expired ones included).
-- The checks also allow 'cancelled' (0013): 0013 landed before this file, so some databases apply
-- this one after it, and the result must be the same in either order.
ALTER TABLE fanout_job ADD COLUMN deadline DATETIME(6) NULL AFTER created_at;
ALTER TABLE fanout_job DROP CONSTRAINT ck_job_state;
ALTER TABLE fanout_job ADD CONSTRAINT ck_job_state CHECK (state IN ('queued', 'running', 'done', 'failed', 'expired', 'cancelled'));
ALTER TABLE fanout_task DROP CONSTRAINT ck_task_state;
ALTER TABLE fanout_task ADD CONSTRAINT ck_task_state CHECK (state IN ('queued', 'running', 'done', 'failed', 'expired', 'cancelled'));
