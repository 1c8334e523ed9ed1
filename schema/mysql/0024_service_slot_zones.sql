-- Issue 18 (docs/FANOUT.md "Local-time publishes"): 1 once every topic slot row of the service carries
-- its recipient's zone (Cassandra topic_notification.zone, CQL 0004), so a local-time or quiet-hours
-- job may read each zone's rows alone. A service created after this migration starts at 1 (every
-- writer stores the zone); one that existed before stays 0, and its planned jobs walk every row with
-- a MySQL zone query per page, until `notee backfill-zones` has written the zone of all its rows.
-- retention: lives as long as its service row.
ALTER TABLE service
  ADD COLUMN IF NOT EXISTS slot_zones TINYINT NOT NULL DEFAULT 0 AFTER quiet_end;
