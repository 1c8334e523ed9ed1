-- Where a task resumes when Cassandra rejects its paging state (issue 14): the clustering key
-- (no, device_token) of the last recipient of the last checkpointed page of current_slot. The
-- worker then re-reads the slot from the row after that key, so a rejected paging state costs no
-- device and no duplicate. NULL: no page of current_slot is checkpointed yet (start of the slot).
-- attempts counts only crashes and unexpected errors since the checkpoint last advanced (a graceful
-- release gives its claim back); see docs/FANOUT.md "Outages".
-- retention: lives as long as its task.
ALTER TABLE fanout_task
  ADD COLUMN IF NOT EXISTS resume_no    BIGINT       NULL AFTER paging_state,
  ADD COLUMN IF NOT EXISTS resume_token VARCHAR(512) CHARACTER SET ascii NULL AFTER resume_no;

-- A user's dead letters are deleted with the user (DATA-RULES: deletion cascades to every store).
-- serves: delete/list a service's dead letters of one device token
CREATE INDEX IF NOT EXISTS ix_dead_letter_token ON dead_letter (service, device_token);
