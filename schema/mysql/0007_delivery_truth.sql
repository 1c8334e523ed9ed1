-- No silent success (issue 13, docs/PROVIDERS.md "Delivery mode and credentials").

-- A service's delivery mode: 'live' sends through its providers (FCM/APNs, or the emulator when
-- NOTEE_EMULATOR_URL is set); 'dry_run' (set by an admin) records every push through the log
-- provider and sends nothing. Only 'dry_run' ever uses the log provider.
-- retention: lives as long as its service.
ALTER TABLE service
  ADD COLUMN IF NOT EXISTS delivery_mode VARCHAR(7) CHARACTER SET ascii NOT NULL DEFAULT 'live' AFTER timezone,
  ADD CONSTRAINT ck_service_delivery_mode CHECK (delivery_mode IN ('live', 'dry_run'));

-- Default values of a template's placeholders ({"name": "there"}): used when the request gives no
-- variable of that name. A CYCLE template needs one for every placeholder (nothing else fills it).
-- retention: lives as long as its template.
ALTER TABLE notification_template
  ADD COLUMN IF NOT EXISTS defaults JSON NULL AFTER data;

-- dry_run: the service's delivery mode when the job was made (a job keeps the mode it was made in).
-- retention: lives as long as its job.
ALTER TABLE fanout_job
  ADD COLUMN IF NOT EXISTS dry_run BOOLEAN NOT NULL DEFAULT FALSE AFTER payload;

-- no_credentials: recipients not sent because the service has no credentials for their platform
-- (also counted in failed). A job whose every recipient is one of them ends failed.
-- retention: lives as long as its task.
ALTER TABLE fanout_task
  ADD COLUMN IF NOT EXISTS no_credentials BIGINT NOT NULL DEFAULT 0 AFTER retried;
