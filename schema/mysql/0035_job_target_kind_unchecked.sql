-- fanout_job.target_kind is checked by the store (notee/store/jobs_sql.py), not by a CHECK constraint:
-- a database that applied the first text of 0026 got one back (added by copying the table, which held
-- every write to fanout_job meanwhile: 58 s at 1M jobs); dropping it is instant and keeps every
-- database's schema the same. A no-op where the revised 0026 ran (docs/DEPLOY.md "Online safety,
-- measured").
ALTER TABLE fanout_job DROP CONSTRAINT IF EXISTS ck_job_target_kind;
