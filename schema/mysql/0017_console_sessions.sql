-- Web console sign-ins (notee/api/console/, docs/CONSOLE.md). The browser's cookie holds a random
-- session id; only its SHA-256 is stored here, so whoever reads this table cannot take a session
-- over. service NULL is an admin session: admin_fingerprint is the SHA-256 of the admin token it
-- signed in with, so changing NOTEE_ADMIN_TOKEN ends every admin session. A service session names
-- the API key it signed in with (key_id): revoking that key ends the session on its next request.
-- csrf_token is the synchronizer token every console form posts back.
-- retention: until expires_at (NOTEE_CONSOLE_SESSION_TTL_S after sign-in); sign-out deletes its row,
-- expired rows are deleted by the hourly retention run (notee/retention.py, `notee prune`).
CREATE TABLE IF NOT EXISTS console_session (
  session_hash       CHAR(64)    CHARACTER SET ascii NOT NULL,
  service            VARCHAR(32) NULL,
  key_id             CHAR(16)    CHARACTER SET ascii NULL,
  admin_fingerprint  CHAR(64)    CHARACTER SET ascii NULL,
  csrf_token         CHAR(43)    CHARACTER SET ascii NOT NULL,
  created_at         DATETIME(6) NOT NULL,
  expires_at         DATETIME(6) NOT NULL,
  PRIMARY KEY (session_hash),
  -- serves: retention: delete the sessions whose expires_at has passed
  KEY ix_console_session_expires (expires_at),
  -- serves: the foreign key to service (a deleted service ends its sessions)
  KEY ix_console_session_service (service),
  CONSTRAINT ck_console_session_kind CHECK (
    (service IS NULL AND key_id IS NULL AND admin_fingerprint IS NOT NULL)
    OR (service IS NOT NULL AND key_id IS NOT NULL AND admin_fingerprint IS NULL)),
  CONSTRAINT fk_console_session_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
