-- Issue 30: audiences (docs/AUDIENCES.md). Tags are typed user attributes beside the user they
-- describe; segments are saved filters; a publish to a user list keeps its list beside its job.
-- Devices gain the app version filters compare (app_version as given, app_version_key sortable).

-- A user's tag: one typed value per key. kind: 's' string (value_str), 'n' number, 'b' boolean
-- (value_num 0/1), 't' timestamp (value_num: seconds since the epoch, UTC).
-- retention: as long as its user: DELETE of the user removes them (ON DELETE CASCADE), as does the
-- deletion of its service; at most settings.tags_per_user_max keys per user.
CREATE TABLE IF NOT EXISTS user_tag (
  service     VARCHAR(32)  NOT NULL,
  user_id     CHAR(36)     CHARACTER SET ascii NOT NULL,
  tag_key     VARCHAR(64)  NOT NULL,
  kind        CHAR(1)      CHARACTER SET ascii NOT NULL,
  value_str   VARCHAR(255) NULL,
  value_num   DOUBLE       NULL,
  updated_at  DATETIME(6)  NOT NULL,
  -- serves: a user's tags (GET, PATCH, export) and a filter's per-user test inside the audience walk
  -- (EXISTS on the primary key, one lookup per walked user)
  PRIMARY KEY (service, user_id, tag_key),
  -- serves: estimates and segment counts driven by an equality/range on a string tag
  KEY ix_user_tag_str (service, tag_key, value_str),
  -- serves: the same for number, boolean and timestamp tags
  KEY ix_user_tag_num (service, tag_key, value_num),
  CONSTRAINT ck_user_tag_kind CHECK (kind IN ('s', 'n', 'b', 't')),
  CONSTRAINT fk_user_tag_user FOREIGN KEY (service, user_id) REFERENCES `user` (service, user_id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A saved, named filter of a service (docs/AUDIENCES.md "Segments"). filter: the filter's JSON as
-- the API took it (validated on write). A job snapshots the definitions of the segments it names
-- when it is created; changing or deleting a segment later never changes a job made before.
-- retention: until the service deletes it (DELETE /v1/segments/{name}) or the service is deleted.
CREATE TABLE IF NOT EXISTS segment (
  service      VARCHAR(32)   NOT NULL,
  name         VARCHAR(64)   NOT NULL,
  description  VARCHAR(500)  NOT NULL DEFAULT '',
  filter       JSON          NOT NULL,
  created_at   DATETIME(6)   NOT NULL,
  updated_at   DATETIME(6)   NOT NULL,
  PRIMARY KEY (service, name),
  CONSTRAINT fk_segment_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The users of a publish to a user list (target kind 'AUD' with "users"), resolved to platform ids
-- when the job is made: the job's recipients are their devices as they are when each page is read.
-- retention: as long as its job (ON DELETE CASCADE: `notee prune` deletes finished jobs).
CREATE TABLE IF NOT EXISTS job_audience_user (
  job_id   CHAR(36)  CHARACTER SET ascii NOT NULL,
  user_id  CHAR(36)  CHARACTER SET ascii NOT NULL,
  -- serves: the audience walk of the job, in user_id order (the slot of a user is its id's first byte)
  PRIMARY KEY (job_id, user_id),
  CONSTRAINT fk_job_audience_user_job FOREIGN KEY (job_id) REFERENCES fanout_job (job_id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin;

-- Device attributes a filter compares: the app version the app reported, and the same made sortable
-- (each numeric part zero-padded: '5.2' -> '00005.00002'), so "app_version >= 5.2" is a string compare.
ALTER TABLE device
  ADD COLUMN IF NOT EXISTS app_version     VARCHAR(32)  CHARACTER SET ascii NULL AFTER locale,
  ADD COLUMN IF NOT EXISTS app_version_key VARCHAR(100) CHARACTER SET ascii NULL AFTER app_version;

-- COND: a publish to a condition over topics (Cassandra slot rows, docs/AUDIENCES.md); AUD: a publish
-- to a filter, segments or a user list (the service's devices walked in MySQL). The old check refused
-- them, so it goes; it is not added back with the new kinds: MariaDB adds a CHECK to an existing table
-- only by copying it, and writes to fanout_job waited 58 s at 1M jobs (docs/DEPLOY.md "Online safety,
-- measured"). The store checks the kind instead (notee/store/jobs_sql.py). Revised after release
-- candidates applied the first text: notee/usecases/migrate.py REVISED accepts that text's checksum,
-- and 0035 drops the check where the first text added it.
ALTER TABLE fanout_job DROP CONSTRAINT IF EXISTS ck_job_target_kind;
