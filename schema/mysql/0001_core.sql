-- Notee core registry: tenants, their API keys and provider credentials, and the seed's user,
-- device and notification_template tables. Timestamps are UTC DATETIME(6).
-- Deviations from the seed (docs/SCHEMA.md): `service` is a real table that the others reference;
-- user/device/template carry created_at/updated_at; device_token is ASCII (provider tokens are).

-- A tenant: one service backend (e.g. SMEEM).
-- retention: kept as long as the tenant exists (removed only by an operator).
CREATE TABLE IF NOT EXISTS service (
  service       VARCHAR(32)  NOT NULL,
  display_name  VARCHAR(200) NOT NULL,
  timezone      VARCHAR(64)  NOT NULL DEFAULT 'Asia/Seoul',
  created_at    DATETIME(6)  NOT NULL,
  PRIMARY KEY (service),
  CONSTRAINT ck_service_id CHECK (service REGEXP '^[A-Z][A-Z0-9_]{1,31}$')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- API keys: the client sends `nk_<key_id>_<secret>`; only sha256(secret) is stored.
-- retention: kept as long as its service; a revoked key keeps its row (revoked_at) for audit.
CREATE TABLE IF NOT EXISTS api_key (
  key_id      CHAR(16)     CHARACTER SET ascii NOT NULL,
  service     VARCHAR(32)  NOT NULL,
  key_hash    BINARY(32)   NOT NULL,
  label       VARCHAR(100) NOT NULL DEFAULT '',
  created_at  DATETIME(6)  NOT NULL,
  revoked_at  DATETIME(6)  NULL,
  PRIMARY KEY (key_id),
  -- serves: list and revoke the keys of one service (admin API)
  KEY ix_api_key_service (service),
  CONSTRAINT fk_api_key_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Provider credentials per service, each a Fernet token (AES-128-CBC + HMAC) under the key in
-- NOTEE_CREDENTIALS_KEY; never returned by the API.
-- retention: lives as long as its service.
CREATE TABLE IF NOT EXISTS provider_credentials (
  service           VARCHAR(32) NOT NULL,
  fcm_encrypted     BLOB        NULL,
  apns_encrypted    BLOB        NULL,
  updated_at        DATETIME(6) NOT NULL,
  PRIMARY KEY (service),
  CONSTRAINT fk_provider_credentials_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Seed `user`: a service's user mapped to a platform user id (UUID).
-- retention: until the service deletes the user (DELETE /v1/users/{user_id} removes the row).
CREATE TABLE IF NOT EXISTS `user` (
  service            VARCHAR(32)  NOT NULL,
  service_user_id    VARCHAR(191) NOT NULL,
  service_user_name  VARCHAR(191) NOT NULL DEFAULT '',
  user_id            CHAR(36)     CHARACTER SET ascii NOT NULL,
  created_at         DATETIME(6)  NOT NULL,
  updated_at         DATETIME(6)  NOT NULL,
  PRIMARY KEY (service, service_user_id),
  -- serves: find a user by platform id within its service (every /v1/users/{user_id} route); the
  -- seed's (service, user_id) index, made unique because a platform id names one user.
  UNIQUE KEY uq_user_user_id (service, user_id),
  CONSTRAINT fk_user_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Seed `device`: a platform user's devices. One token may belong to several users of a service.
-- retention: until the user or the device is deleted, or the provider reports the token invalid
-- (pruned by the fan-out engine); deleting the user cascades here.
CREATE TABLE IF NOT EXISTS device (
  service       VARCHAR(32)  NOT NULL,
  user_id       CHAR(36)     CHARACTER SET ascii NOT NULL,
  device_token  VARCHAR(512) CHARACTER SET ascii NOT NULL,
  device_os     VARCHAR(3)   CHARACTER SET ascii NOT NULL,
  region        VARCHAR(8)   NOT NULL DEFAULT '',
  created_at    DATETIME(6)  NOT NULL,
  updated_at    DATETIME(6)  NOT NULL,
  PRIMARY KEY (service, user_id, device_token),
  -- serves: token rotation and invalid-token pruning: every user of a service holding a token
  KEY ix_device_token (service, device_token),
  CONSTRAINT ck_device_os CHECK (device_os IN ('IOS', 'AOS')),
  CONSTRAINT fk_device_user FOREIGN KEY (service, user_id) REFERENCES `user` (service, user_id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Seed `notification_template`, plus optional data/ttl/priority. notification_key is created once
-- and never changes; the cache version lives in Cassandra's numbering counters.
-- retention: until the service deletes the template.
CREATE TABLE IF NOT EXISTS notification_template (
  service              VARCHAR(32)   NOT NULL,
  notification_method  VARCHAR(6)    CHARACTER SET ascii NOT NULL,
  notification_type    VARCHAR(64)   NOT NULL,
  title                VARCHAR(200)  NOT NULL,
  body                 VARCHAR(2000) NOT NULL,
  data                 JSON          NULL,
  ttl_seconds          INT           NULL,
  priority             VARCHAR(6)    CHARACTER SET ascii NOT NULL DEFAULT 'high',
  notification_key     CHAR(36)      CHARACTER SET ascii NOT NULL,
  created_at           DATETIME(6)   NOT NULL,
  updated_at           DATETIME(6)   NOT NULL,
  PRIMARY KEY (service, notification_method, notification_type),
  -- serves: resolve a template from its notification_key (fan-out jobs and the scheduler's due index)
  UNIQUE KEY uq_template_key (notification_key),
  CONSTRAINT ck_template_method CHECK (notification_method IN ('TOPIC', 'CYCLE', 'SINGLE')),
  CONSTRAINT ck_template_priority CHECK (priority IN ('high', 'normal')),
  CONSTRAINT ck_template_ttl CHECK (ttl_seconds IS NULL OR ttl_seconds BETWEEN 0 AND 2419200),
  CONSTRAINT fk_template_service FOREIGN KEY (service) REFERENCES service (service) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
