-- Issue 37: GET /v1/users lists a service's users newest first, a page at a time (keyset paging on
-- (created_at, user_id)), filtered by creation time, "has devices" and platform (EXISTS on device's
-- primary key, which begins with (service, user_id)).
-- serves: GET /v1/users ordered by (created_at, user_id) within a service, and created_since
CREATE INDEX IF NOT EXISTS ix_user_created ON `user` (service, created_at, user_id);
