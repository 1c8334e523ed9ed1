-- Issue 30: bulk import of a service's users, devices, tags and topic subscriptions
-- (docs/AUDIENCES.md "Import and export"). An upload is split into chunks of lines kept here; the
-- worker leases a chunk (SKIP LOCKED, like fan-out tasks), applies it and marks it done, so a crash
-- redoes at most one chunk and the upserts make that harmless. Lines that fail are kept with their
-- line number and reason.

-- One upload. state: queued (no chunk claimed yet), running, done (every chunk done). lines_total:
-- the data lines of the file (blank lines and a CSV header are not counted); lines_done: lines
-- processed, failed or not; lines_failed: lines with an error row. header: a CSV file's header line.
-- retention: finished imports are deleted settings.retention_days after they finished (their chunks and
-- errors cascade: notee/usecases/retention.py prune_imports); every import goes with its service.
CREATE TABLE IF NOT EXISTS import_job (
  import_id     CHAR(36)      CHARACTER SET ascii NOT NULL,
  service       VARCHAR(32)   NOT NULL,
  format        VARCHAR(8)    CHARACTER SET ascii NOT NULL,
  state         VARCHAR(16)   CHARACTER SET ascii NOT NULL,
  header        TEXT          NULL,
  lines_total   INT           NOT NULL DEFAULT 0,
  lines_done    INT           NOT NULL DEFAULT 0,
  lines_failed  INT           NOT NULL DEFAULT 0,
  chunks_total  INT           NOT NULL DEFAULT 0,
  chunks_done   INT           NOT NULL DEFAULT 0,
  created_at    DATETIME(6)   NOT NULL,
  started_at    DATETIME(6)   NULL,
  finished_at   DATETIME(6)   NULL,
  PRIMARY KEY (import_id),
  -- serves: GET /v1/imports, a service's imports newest first (keyset on (created_at, import_id))
  KEY ix_import_job_service (service, created_at, import_id),
  -- serves: retention, finished imports by finish time
  KEY ix_import_job_finished (state, finished_at),
  CONSTRAINT ck_import_job_format CHECK (format IN ('ndjson', 'csv')),
  CONSTRAINT ck_import_job_state CHECK (state IN ('queued', 'running', 'done')),
  CONSTRAINT fk_import_job_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A chunk of an import: up to settings.import_chunk_lines lines, as a JSON array of
-- [line number, line] (a CSV line: its list of fields). state: queued, running (leased by
-- lease_token until lease_until), done (its lines emptied: lines '[]'). stored: the chunk's MySQL
-- writes are committed (a chunk taken over resumes with its Cassandra writes); copies: the devices
-- added to users that existed before, which get their users' subscriptions then.
-- retention: as long as its import (ON DELETE CASCADE); the lines are emptied once the chunk is done.
CREATE TABLE IF NOT EXISTS import_chunk (
  import_id    CHAR(36)      CHARACTER SET ascii NOT NULL,
  chunk_no     INT           NOT NULL,
  service      VARCHAR(32)   NOT NULL,
  first_line   INT           NOT NULL,
  last_line    INT           NOT NULL,
  line_count   INT           NOT NULL,
  `lines`      MEDIUMTEXT    NOT NULL,
  state        VARCHAR(16)   CHARACTER SET ascii NOT NULL DEFAULT 'queued',
  stored       TINYINT(1)    NOT NULL DEFAULT 0,
  copies       MEDIUMTEXT    NULL,
  lease_owner  VARCHAR(100)  NULL,
  lease_token  CHAR(32)      CHARACTER SET ascii NULL,
  lease_until  DATETIME(6)   NULL,
  attempts     INT           NOT NULL DEFAULT 0,
  PRIMARY KEY (import_id, chunk_no),
  -- serves: the worker's claim (queued chunks, and running ones whose lease expired), SKIP LOCKED
  KEY ix_import_chunk_open (state, lease_until),
  CONSTRAINT ck_import_chunk_state CHECK (state IN ('queued', 'running', 'done')),
  CONSTRAINT fk_import_chunk_job FOREIGN KEY (import_id) REFERENCES import_job (import_id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A line of an import that was not applied: its line number in the file and why (nothing of the line
-- was written). Written in the transaction that applies the line's chunk; a chunk redone rewrites it.
-- retention: as long as its import (ON DELETE CASCADE).
CREATE TABLE IF NOT EXISTS import_error (
  import_id  CHAR(36)      CHARACTER SET ascii NOT NULL,
  line_no    INT           NOT NULL,
  reason     VARCHAR(500)  NOT NULL,
  -- serves: GET /v1/imports/{id}/errors in line order (keyset on line_no), and a chunk's count
  PRIMARY KEY (import_id, line_no),
  CONSTRAINT fk_import_error_job FOREIGN KEY (import_id) REFERENCES import_job (import_id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
