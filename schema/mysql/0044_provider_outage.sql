-- A fan-out page handed back during a provider outage (docs/FANOUT.md "Outages"): its task is released
-- without advancing its checkpoint, so the next claim reads the same page again. What the page already
-- did (devices delivered, pruned, dead-lettered for their own reason, no_credentials) is counted on the
-- task in the release's transaction and kept here, so the next claim skips those devices: nothing is
-- pushed twice, nothing counted twice, and the provider's devices wait for it however long the outage
-- lasts (bounded by the push's ttl_seconds: then counted in ttl_expired, never dead-lettered).
-- Written only on that rare path; the checkpoint that moves the task past the page deletes them.
-- held_since: when the page was first tried (its pushes' TTL counts from there).
-- retention: until the task's checkpoint moves past the page (that transaction deletes the rows); a
-- task that ends otherwise (cancelled, failed, expired) keeps them for a requeue until its job is pruned
-- (notee/usecases/retention.py), which takes them (ON DELETE CASCADE).
-- A new table: online-safe.
CREATE TABLE IF NOT EXISTS fanout_page_hold (
  job_id        CHAR(36)     CHARACTER SET ascii NOT NULL,
  task_no       INT          NOT NULL,
  held_since    DATETIME(6)  NOT NULL,
  -- serves: the claim's read of its page's hold (job_id, task_no); the checkpoint's delete
  PRIMARY KEY (job_id, task_no),
  CONSTRAINT fk_page_hold_task FOREIGN KEY (job_id, task_no) REFERENCES fanout_task (job_id, task_no)
    ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The devices of a held page that are done (one row per device token).
-- retention: lives as long as its page's hold (deleted in the same transaction as the hold row);
-- a task pruned with its job takes its rows (ON DELETE CASCADE).
-- A new table: online-safe.
CREATE TABLE IF NOT EXISTS fanout_page_done (
  job_id        CHAR(36)     CHARACTER SET ascii NOT NULL,
  task_no       INT          NOT NULL,
  device_token  VARCHAR(512) CHARACTER SET ascii NOT NULL,
  -- serves: the claim's read of the page's done devices (job_id, task_no); the checkpoint's delete
  PRIMARY KEY (job_id, task_no, device_token),
  CONSTRAINT fk_page_done_task FOREIGN KEY (job_id, task_no) REFERENCES fanout_task (job_id, task_no)
    ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Recipients of a held page whose push outlived its ttl_seconds while its provider was unreachable: not
-- sent (a push past its TTL is worthless), not dead-lettered, not part of targeted = sent + failed + pruned.
-- retention: lives as long as its task.
-- ADD COLUMN with a default: instant in MariaDB 10.3+, online-safe.
ALTER TABLE fanout_task
  ADD COLUMN IF NOT EXISTS ttl_expired BIGINT NOT NULL DEFAULT 0 AFTER quiet_dropped;
