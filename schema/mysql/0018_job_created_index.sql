-- The admin delivery summary (GET /v1/admin/delivery-summary, notee/store/activity_sql.py) reads the
-- jobs of every service created since a time in one query instead of one per service.
-- serves: jobs of every service created at or after a time (created_at >= :since), the admin summary
CREATE INDEX IF NOT EXISTS ix_job_created ON fanout_job (created_at);
