-- Idempotency keys get namespaces and a request fingerprint (issue 15 item 6).
-- A client's Idempotency-Key is stored as `client:<key>` and the scheduler's tick keys as
-- `cycle:...`, so no client key can ever name a job the scheduler created (or the reverse);
-- request_hash is the sha256 of what the first request asked for, so the same key sent with a
-- different request answers 422 instead of returning the first job. Jobs created before this
-- migration have no hash (NULL): their keys keep answering with their job.
ALTER TABLE fanout_job
  MODIFY idempotency_key VARCHAR(255) NULL,
  ADD COLUMN request_hash CHAR(64) CHARACTER SET ascii NULL AFTER idempotency_key;

-- Keys of topic publishes came from clients: move them into the client namespace.
UPDATE fanout_job SET idempotency_key = CONCAT('client:', idempotency_key)
  WHERE idempotency_key IS NOT NULL AND notification_method = 'TOPIC' AND idempotency_key NOT LIKE 'client:%';
