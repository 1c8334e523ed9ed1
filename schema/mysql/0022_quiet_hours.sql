-- Quiet hours (issue 18 item 3, docs/API.md "Quiet hours"): a daily local-time window, in minutes of
-- the day (start > end crosses midnight: 22:00-07:00 is 1320-420), during which TOPIC pushes are
-- held until it ends (or dropped, as the template says). A user's window replaces its service's;
-- both NULL: none. Cycle pushes are never affected; a single send opts in per request.
-- retention: lives as long as its service / user row.
ALTER TABLE service
  ADD COLUMN IF NOT EXISTS quiet_start SMALLINT NULL AFTER timezone,
  ADD COLUMN IF NOT EXISTS quiet_end SMALLINT NULL AFTER quiet_start,
  ADD CONSTRAINT ck_service_quiet CHECK ((quiet_start IS NULL AND quiet_end IS NULL)
    OR (quiet_start BETWEEN 0 AND 1439 AND quiet_end BETWEEN 0 AND 1439 AND quiet_start <> quiet_end));
ALTER TABLE `user`
  ADD COLUMN IF NOT EXISTS quiet_start SMALLINT NULL AFTER timezone,
  ADD COLUMN IF NOT EXISTS quiet_end SMALLINT NULL AFTER quiet_start,
  ADD CONSTRAINT ck_user_quiet CHECK ((quiet_start IS NULL AND quiet_end IS NULL)
    OR (quiet_start BETWEEN 0 AND 1439 AND quiet_end BETWEEN 0 AND 1439 AND quiet_start <> quiet_end));

-- serves: a topic publish: the distinct (time zone, window) pairs of a service's users that carry
-- quiet hours (SELECT DISTINCT timezone, quiet_start, quiet_end ... WHERE service = ? AND
-- quiet_start IS NOT NULL), read from the index alone.
CREATE INDEX IF NOT EXISTS ix_user_quiet ON `user` (service, quiet_start, quiet_end, timezone);

-- What a template's TOPIC push does in a recipient's quiet hours: 'hold' (sent when they end) or
-- 'drop' (not sent, counted in the job's quiet_dropped).
-- retention: lives as long as its template.
ALTER TABLE notification_template
  ADD COLUMN IF NOT EXISTS quiet_hours VARCHAR(4) CHARACTER SET ascii NOT NULL DEFAULT 'hold' AFTER priority,
  ADD CONSTRAINT ck_template_quiet_hours CHECK (quiet_hours IN ('hold', 'drop'));

-- Recipients a task did not send because they were in quiet hours and the template drops (not part
-- of targeted = sent + failed + pruned).
-- retention: lives as long as its task.
ALTER TABLE fanout_task
  ADD COLUMN IF NOT EXISTS quiet_dropped BIGINT NOT NULL DEFAULT 0 AFTER no_credentials;
