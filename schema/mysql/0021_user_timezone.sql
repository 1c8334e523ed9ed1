-- Local-time delivery (issue 18 item 2, docs/API.md "Local-time publish"): a user may carry an IANA
-- time zone; NULL means the service's (service.timezone). A topic publish with local_time reaches
-- each recipient when its zone's clock shows that time: the publish reads the zones in use once, and
-- each fan-out page of such a job reads its users' zones in one query.
-- retention: lives as long as its user row.
ALTER TABLE `user`
  ADD COLUMN IF NOT EXISTS timezone VARCHAR(64) NULL AFTER locale;

-- serves: a local-time publish: the distinct time zones of one service's users (SELECT DISTINCT
-- timezone ... WHERE service = ?, read from the index alone).
CREATE INDEX IF NOT EXISTS ix_user_timezone ON `user` (service, timezone);
