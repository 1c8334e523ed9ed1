-- Listing a service's jobs newest first (GET /v1/jobs, `notee jobs list`, the console).
-- serves: GET /v1/jobs: one service's jobs by created_at DESC, job_id DESC (keyset paging), without
-- a sort over every job of the service.
CREATE INDEX IF NOT EXISTS ix_job_service_created ON fanout_job (service, created_at, job_id);
