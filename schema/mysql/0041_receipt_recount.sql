-- Issue 36, engagement: jobs whose receipt counters may have missed events (docs/ENGAGEMENT.md
-- "Storage, and counting once"). A batch of POST /v1/receipts writes its rows, then adds the new ones
-- to the counters; a counter write that fails (or whose outcome is unknown: a timeout) after its rows
-- landed answers 503, and the retry finds the rows and counts nothing. Before that answer, and when a
-- batch is still unanswered after notee.usecases.receipt_counting.INTENT_AFTER_S (its process may die
-- before it counts), the batch's jobs are kept here; the scheduler (notee/usecases/receipt_repair.py)
-- sets each kept job's counters to its raw rows once the job has had no receipt for a while.
-- source: the notification source (a job id without its dashes, or a single send's id).
-- retention: until repaired (the scheduler's transaction deletes the rows it repaired; a job gone from
-- MySQL takes its rows at the next run); a deleted service takes its rows (ON DELETE CASCADE).
-- A new table: online-safe.
CREATE TABLE IF NOT EXISTS receipt_recount (
  recount_id  BIGINT       NOT NULL AUTO_INCREMENT,
  service     VARCHAR(32)  NOT NULL,
  source      VARCHAR(32)  CHARACTER SET ascii NOT NULL,
  created_at  DATETIME(6)  NOT NULL,
  -- serves: the scheduler's walk of the kept jobs in order (keyset on recount_id); its delete by id
  PRIMARY KEY (recount_id),
  CONSTRAINT fk_receipt_recount_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
