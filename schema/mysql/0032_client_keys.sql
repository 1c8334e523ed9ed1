-- Issue 36, engagement: client keys (docs/ENGAGEMENT.md "Client keys"). A client key is safe to ship
-- inside an app: it is sent as `nck_<key_id>_<secret>` and may only POST /v1/receipts for its own
-- service; a server key (`nk_`, every key made before this file) may do everything a service may.
-- kind is checked at the edge and by notee/store/services_sql.py (`server` | `client`). An instant
-- ADD COLUMN with a constant default (MariaDB 10.3+): no table copy, online-safe.
-- retention: lives as long as its row (api_key: kept as long as its service).
ALTER TABLE api_key
  ADD COLUMN IF NOT EXISTS kind VARCHAR(6) CHARACTER SET ascii NOT NULL DEFAULT 'server' AFTER service;
