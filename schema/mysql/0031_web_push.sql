-- Web Push (issue 32, docs/WEB-PUSH.md): browsers as a third platform.
-- A WEB device's token is its browser push subscription, `<p256dh>.<auth>.<endpoint>`
-- (notee/core/webpush_token.py): it fits the existing device_token column (the endpoint is limited
-- to 401 characters), so only the platform check changes: it is dropped (instant) and the store
-- checks the platform (notee/store/users_sql.py upsert_device, as the API and the import lines do):
-- re-adding a wider CHECK would copy the device table and hold every registration meanwhile
-- (docs/DATA-RULES.md, tests/unit/test_migrations_online.py).
-- retention: unchanged (0001: until the user or device is deleted, or the push service answers
-- 404/410 and the fan-out prunes it).
ALTER TABLE device DROP CONSTRAINT IF EXISTS ck_device_os;
-- Each service's VAPID key pair (RFC 8292): the P-256 private key and the subject, one Fernet token
-- under NOTEE_CREDENTIALS_KEY like the FCM and APNs credentials; never returned (the public key is
-- derived from it).
-- retention: lives as long as its service (0001's provider_credentials row).
ALTER TABLE provider_credentials ADD COLUMN IF NOT EXISTS webpush_encrypted BLOB NULL AFTER apns_encrypted;
