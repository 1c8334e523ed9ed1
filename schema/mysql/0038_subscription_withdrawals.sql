-- Issue 31 (chaos run): withdrawals of subscription rows that a write under fresh numbers may have left
-- in Cassandra (docs/RELIABILITY.md, "Found by the chaos run"). A logged batch that timed out is still
-- applied later by Cassandra's batchlog; its writer deletes the rows again with USING TIMESTAMP just
-- after the batch's own (written_at + 1), which shadows the late batch whenever it lands. A withdrawal
-- that could not be written (the same outage), or a batch still unanswered after
-- notee.domain.withdrawals.INTENT_AFTER_S (its process may die before it knows), is kept here, one row
-- per user, and applied later by whoever next removes that user's rows (unsubscribe, device removal or
-- rotation, user deletion, under the user's exclusive lock) or by the scheduled `notee reconcile`.
-- index_rows: JSON list of the user's index rows the write added ([method, type, target, token, data]).
-- state: 'unanswered' (kept while the writer still waits on its batch: only a remover holding the user
-- exclusively, or anyone once it is older than the longest a writer waits, may apply it) or 'failed'
-- (the batch failed and its withdrawal could not be written: anyone may apply it).
-- No foreign key to `user`: the writer records while it holds the user's row lock in another
-- transaction (a foreign key check would wait for that lock), and a deleted user's rows must still go.
-- retention: until applied (the remover's or reconcile's transaction deletes the row; a row whose
-- withdrawal fails stays for the next run); a deleted service takes its rows (ON DELETE CASCADE).
-- A new table: online-safe.
CREATE TABLE IF NOT EXISTS subscription_withdrawal (
  withdrawal_id  BIGINT       NOT NULL AUTO_INCREMENT,
  service        VARCHAR(32)  NOT NULL,
  user_id        CHAR(36)     CHARACTER SET ascii NOT NULL,
  written_at     BIGINT       NOT NULL,
  state          VARCHAR(10)  CHARACTER SET ascii NOT NULL,
  index_rows     JSON         NOT NULL,
  created_at     DATETIME(6)  NOT NULL,
  -- serves: reconcile's walk of every pending withdrawal in order (keyset on withdrawal_id)
  PRIMARY KEY (withdrawal_id),
  -- serves: a remover's read of its locked users' pending withdrawals; the writer's delete of its own
  KEY ix_subscription_withdrawal_user (service, user_id, written_at),
  CONSTRAINT ck_subscription_withdrawal_state CHECK (state IN ('unanswered', 'failed')),
  CONSTRAINT fk_subscription_withdrawal_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
