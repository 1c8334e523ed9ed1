# over 400 lines: one settings class, one documented field per NOTEE_* variable (docs/CONFIGURATION is generated from it)
"""Notee's configuration: one pydantic-settings class read from ``NOTEE_*`` environment variables.

Build it with ``Settings()`` at process start-up (the CLI and the app factories do); nothing in
Notee builds it at import time, so tests and tools can set the environment first.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from cryptography.fernet import Fernet
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MIN_ADMIN_TOKEN_LEN = 32


class Settings(BaseSettings):
    # hide_input_in_errors: a rejected value (a short admin token, a bad key) never appears in the
    # error text, which may be logged.
    model_config = SettingsConfigDict(env_prefix="NOTEE_", extra="ignore", hide_input_in_errors=True)

    # --- stores -----------------------------------------------------------------------------
    mysql_url: SecretStr = Field(
        SecretStr("mysql+pymysql://notee:notee@127.0.0.1:3306/notee"),
        description="SQLAlchemy URL of the MySQL 8 / MariaDB >= 10.6 database.",
    )
    mysql_pool_size: int = Field(
        20,
        ge=1,
        description="Connections kept per process (as many again may overflow); the API serves "
        "up to 40 requests at once on its thread pool.",
    )
    mysql_connect_timeout_s: int = Field(
        3, ge=1, description="Fail fast when MySQL is down: requests answer 503 instead of hanging."
    )
    cassandra_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1"],
        description="Comma-separated Cassandra contact points.",
    )
    cassandra_port: int = Field(9042, description="CQL native transport port.")
    cassandra_protocol_version: int = Field(5, ge=4, description="CQL native protocol version (Cassandra 4+: 5).")
    cassandra_local_dc: str = Field("datacenter1", description="Local datacenter for routing.")
    cassandra_keyspace_notification: str = Field(
        "notification", description="Keyspace of the subscription tables (seed name)."
    )
    cassandra_keyspace_numbering: str = Field("numbering", description="Keyspace of the counter table (seed name).")
    cassandra_replication: str = Field(
        "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        description="Replication map used when migrations create the keyspaces.",
    )
    cassandra_consistency: str = Field(
        "LOCAL_QUORUM", description="Consistency level of reads and writes (LOCAL_QUORUM, QUORUM, ONE, ...)."
    )
    cassandra_request_timeout_s: float = Field(10.0, gt=0, description="Per-request timeout.")
    cassandra_schema_agreement_wait_s: float = Field(
        60.0,
        gt=0,
        description="`notee migrate`: how long to wait after each DDL statement for every live node "
        "to report the same schema version before failing.",
    )

    # --- security ---------------------------------------------------------------------------
    admin_token: SecretStr | None = Field(
        None,
        description="Bearer token of the admin API (create services and keys), at least 32 characters. "
        "Unset: admin API off.",
    )
    credentials_key: SecretStr | None = Field(
        None,
        description="Fernet key (urlsafe base64, 32 bytes) encrypting provider credentials at rest. "
        "Required before credentials can be stored.",
    )
    credentials_old_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated earlier credentials keys, still accepted for reading while "
        "`notee credentials rotate-key` re-encrypts everything under NOTEE_CREDENTIALS_KEY.",
    )

    # --- api ----------------------------------------------------------------------------------
    api_host: str = Field("127.0.0.1", description="Address `notee api` binds.")
    api_port: int = Field(8080, description="Port `notee api` binds.")
    api_tls_cert_file: str | None = Field(
        None, description="PEM certificate (chain) `notee api` serves HTTPS with; needs api_tls_key_file."
    )
    api_tls_key_file: str | None = Field(None, description="PEM private key of api_tls_cert_file.")
    api_admin_host: str = Field("127.0.0.1", description="Address of the admin listener (with api_admin_port).")
    api_admin_port: int | None = Field(
        None,
        description="Serve the admin API on its own listener at this port (and not on the tenant one). "
        "Unset: one listener serves both.",
    )
    api_max_body_bytes: int = Field(
        1_048_576, ge=1024, description="Largest request body; a larger one answers 413 before it is read."
    )
    api_max_json_depth: int = Field(32, ge=4, description="Deepest JSON nesting of a request body (422 beyond).")
    api_max_url_bytes: int = Field(8192, ge=256, description="Longest path + query string (414 beyond).")
    api_max_header_bytes: int = Field(
        16384, ge=1024, description="Largest request line + headers; the HTTP server refuses a larger one (400)."
    )
    api_max_concurrency: int = Field(
        100, ge=1, description="Requests in progress per `notee api` process; more answer 503 `overloaded`."
    )
    api_max_concurrency_per_address: int = Field(50, ge=1, description="Of those, from one address (IPv6: a /64).")
    api_max_connections: int = Field(
        1000, ge=1, description="Open connections per `notee api` process; more answer 503 (the HTTP server's own)."
    )
    api_max_connections_per_address: int = Field(
        100,
        ge=0,
        description="Open connections per client address (IPv6: per /64) per `notee api` process; more "
        "are answered 429 `too_many_connections` and closed at once. Trusted proxies are exempt. 0: no cap.",
    )
    api_head_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="A request head must be whole this long after the connection is accepted "
        "(or its first byte, on a kept-alive connection); else 408 `request_timeout` and the connection closes.",
    )
    api_keepalive_timeout_s: int = Field(5, ge=1, le=300, description="An idle kept-alive connection is closed then.")
    api_body_idle_timeout_s: float = Field(30.0, gt=0, le=600, description="A body silent this long: 408, closed.")
    api_keepalive_max_requests: int = Field(1000, ge=1, description="Requests per connection (then it closes).")
    api_trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated addresses or networks of the TLS proxies in front: "
        "only their X-Forwarded-For / -Proto are believed. Unset: no forwarded header is believed.",
    )
    api_key_cache_s: float = Field(
        5.0,
        ge=0,
        le=60,
        description="An API key that authenticated is trusted this long (seconds) without a MySQL lookup; "
        "a revocation is effective at once in the process that served it, within this time in every "
        "other `notee api` process. 0: every request looks the key up.",
    )
    api_shutdown_budget_s: int = Field(
        10,
        ge=1,
        description="SIGTERM: in-flight requests get this long to finish (single sends stop waiting to "
        "retry at once and dead-letter what waited).",
    )

    # --- web console (/console, docs/CONSOLE.md) -------------------------------------------------
    console_session_ttl_s: int = Field(
        28800, ge=60, le=604800, description="A console sign-in lasts this long (seconds), then signs in again."
    )
    console_signin_failures: int = Field(
        10,
        ge=1,
        description="Failed console sign-ins allowed per client address per minute (per `notee api` "
        "process); more answer 429 until the minute has passed.",
    )

    # --- per-tenant rate limits (defaults; the admin API sets them per service) -------------------
    rate_limits_enabled: bool = Field(
        True, description="Check per-tenant rate limits (one MySQL UPDATE per request, per few under load)."
    )
    rate_limit_publish_rate: float = Field(50.0, gt=0, description="Topic publishes per second per service.")
    rate_limit_publish_burst: int = Field(200, ge=1, description="Topic publishes allowed at once after a quiet spell.")
    rate_limit_send_rate: float = Field(200.0, gt=0, description="Single sends per second per service.")
    rate_limit_send_burst: int = Field(1000, ge=1, description="Single sends allowed at once.")
    rate_limit_write_rate: float = Field(1000.0, gt=0, description="Subscription and other tenant writes per second.")
    rate_limit_write_burst: int = Field(5000, ge=1, description="Tenant writes allowed at once.")
    rate_limit_read_rate: float = Field(2000.0, gt=0, description="Tenant reads (GET) per second per service.")
    rate_limit_read_burst: int = Field(10000, ge=1, description="Tenant reads allowed at once.")
    rate_limit_receipt_rate: float = Field(
        5000.0, gt=0, description="Receipts requests (POST /v1/receipts, the apps') per second per service."
    )
    rate_limit_receipt_burst: int = Field(50000, ge=1, description="Receipts requests allowed at once.")

    # --- providers ------------------------------------------------------------------------------
    emulator_url: str | None = Field(
        None,
        description="Send every push to this Notee emulator (https://host:port) instead of FCM/APNs.",
    )
    emulator_ca_file: str | None = Field(None, description="CA certificate that signed the emulator's TLS cert.")
    emulator_standin: bool = Field(
        False,
        description="With emulator_url: a service without credentials for a platform still sends there, as if it "
        "had stand-in ones (make run's embedded emulator). Off: the emulator gets only what the service's own "
        "credentials could send (staging).",
    )
    emulator_apns_url: str | None = Field(
        None,
        description="APNs origin of a `notee emulator --realistic` (its own HTTP/2 port); default: NOTEE_EMULATOR_URL.",
    )
    emulator_host: str = Field("127.0.0.1", description="Address `notee emulator` binds.")
    emulator_port: int = Field(8443, description="Port `notee emulator` binds.")
    emulator_state_dir: str = Field(".run/emulator", description="Where `notee emulator` keeps its test CA.")

    # --- fan-out --------------------------------------------------------------------------------
    fanout_fetch_size: int = Field(1000, ge=10, le=30000, description="Recipients read per Cassandra page.")
    fanout_send_concurrency: int = Field(200, ge=1, description="Pushes in flight per worker.")
    fanout_lease_s: int = Field(30, ge=5, description="Task lease; a dead worker's task is reclaimed after it.")
    fanout_max_attempts: int = Field(5, ge=1, description="Sends per device before it is dead-lettered.")
    fanout_provider_wait_s: float = Field(
        600.0,
        ge=0,
        description="How long a fan-out page waits inside itself for a provider refusing for its own reasons "
        "(5xx, FCM's project quota with Retry-After) or unreachable, before it is handed back with its done "
        "devices kept and claimed again later: an outage delays a publish, it never dead-letters it.",
    )
    fanout_stop_grace_s: float = Field(
        20.0,
        gt=0,
        description="SIGTERM: a worker's lanes get this long to checkpoint or release their tasks; "
        "after it they are abandoned (their leases expire and another worker resumes).",
    )
    fanout_outage_backoff_cap_s: float = Field(
        30.0, gt=0, description="Longest wait before a task released for a store or provider outage is tried again."
    )
    fanout_breaker_max_open_s: float = Field(
        30.0, gt=0, description="Longest a provider's circuit breaker stays open before it lets a probe through."
    )
    fanout_spare_lane: bool = Field(
        True,
        description="`notee worker` runs one lane more than --lanes that only takes work of a tenant no lane "
        "serves (docs/FANOUT.md, fairness): a small publish does not wait for a large one's pages.",
    )
    fanout_fair_slice_s: float = Field(
        0.5,
        ge=0,
        description="A task keeps its lane at least this long; after it, the task gives the lane back at its next "
        "checkpoint when another tenant with fewer running tasks waits (docs/FANOUT.md, fairness).",
    )
    retention_days: int = Field(
        14,
        ge=1,
        description="Days finished jobs, tasks, ticks and dead letters are kept (a finished job at least "
        "NOTEE_RECEIPTS_RETENTION_DAYS: a job and its receipts go together).",
    )
    receipts_retention_days: int = Field(
        30,
        ge=1,
        le=365,
        description="Days the raw receipts of apps are kept (Cassandra TTL); an event older than this is refused "
        "per item (docs/ENGAGEMENT.md).",
    )
    receipts_max_events: int = Field(
        500, ge=1, le=10_000, description="Most events one POST /v1/receipts may carry (more: 422)."
    )
    receipts_future_s: int = Field(
        300, ge=0, description="An event stamped more than this many seconds ahead of the API's clock is refused."
    )
    schedule_grace_s: int = Field(
        60,
        ge=0,
        description="A send_at up to this many seconds in the past (database clock) is sent at once; older is 422.",
    )
    schedule_max_days: int = Field(30, ge=1, le=366, description="Furthest ahead a send_at may be, in days.")
    condition_members_max: int = Field(
        1_000_000,
        ge=1,
        description="A condition publish loads the members of the condition's topics it does not walk into a set "
        "(about 200 bytes each, once per job and worker process): a topic whose subscriber counter exceeds this "
        "is refused (422) at publish (docs/AUDIENCES.md).",
    )

    # --- audiences (docs/AUDIENCES.md) -----------------------------------------------------------
    tags_per_user_max: int = Field(
        100, ge=1, le=10_000, description="Tag keys a user may hold; a write that would leave more answers 422."
    )
    # --- bulk import (docs/AUDIENCES.md "Import and export") ---------------------------------------
    import_max_body_bytes: int = Field(
        67_108_864,
        ge=1024,
        description="Largest file POST /v1/imports takes (its own body limit); a larger one answers 413 before it is read.",
    )
    import_chunk_lines: int = Field(
        1000, ge=1, le=10_000, description="Lines per chunk of an import: the unit a worker leases, applies and redoes."
    )
    import_max_line_bytes: int = Field(
        65_536,
        ge=1024,
        le=4_194_304,
        description="Longest line of an import; a longer one is a failed line, kept with its number.",
    )
    import_lanes: int = Field(
        2, ge=0, le=16, description="Import chunks a notee worker applies at once (0: this worker takes no import)."
    )
    import_lease_s: float = Field(
        30, ge=1, description="Lease of an import chunk; a dead worker's chunk is taken over after it."
    )

    # --- delivery webhooks (docs/WEBHOOKS.md) -----------------------------------------------------
    webhook_ca_file: str | None = Field(
        None, description="PEM CA bundle `notee webhooks` trusts besides the system's (a private CA, tests)."
    )
    webhook_allow_http: bool = Field(
        False, description="Accept http:// endpoints (development only; production endpoints are HTTPS)."
    )
    webhook_allow_private_addresses: bool = Field(
        False,
        description="Accept endpoints on loopback, private, link-local or otherwise non-public addresses "
        "(development and tests; off, they are refused when registered and again when sent to).",
    )
    webhook_timeout_s: float = Field(10.0, gt=0, le=60, description="Per-attempt timeout of a webhook POST.")
    webhook_retry_hours: int = Field(24, ge=1, le=72, description="A delivery is retried this long, then failed.")
    webhook_backoff_base_s: float = Field(
        5.0, gt=0, description="Wait after a webhook's first failed attempt; doubles per attempt up to an hour."
    )
    webhook_concurrency: int = Field(32, ge=1, le=512, description="Webhook POSTs in flight per dispatcher.")
    webhook_max_endpoints: int = Field(10, ge=1, le=100, description="Webhook endpoints a service may register.")
    webhook_receipt_batch_events: int = Field(
        100,
        ge=1,
        le=500,
        description="Most engagement events (receipt.*) one webhook delivery carries (docs/WEBHOOKS.md).",
    )
    webhook_receipt_window_s: float = Field(
        2.0,
        ge=0,
        le=60,
        description="How long engagement events wait in the outbox for others of their endpoint and kind to join "
        "their delivery (a batch), before the dispatcher may send them.",
    )
    segments_per_service_max: int = Field(
        1000, ge=1, le=100_000, description="Saved segments a service may have (409 beyond; docs/AUDIENCES.md)."
    )

    # --- scheduler ------------------------------------------------------------------------------
    scheduler_grace_minutes: int = Field(
        10, ge=0, description="Missed minutes younger than this are run late; older ones are skipped."
    )
    scheduler_lease_s: int = Field(
        120, ge=0, description="A minute claimed this long ago and still running is taken over (its owner died)."
    )
    scheduler_namespace: str = Field(
        "default",
        min_length=1,
        max_length=64,
        description="Scheduler replicas sharing a namespace claim each minute once between them.",
    )
    scheduler_job_concurrency: int = Field(8, ge=1, le=64, description="Jobs created in parallel per minute.")
    scheduler_max_clock_skew_s: float = Field(
        5.0,
        gt=0,
        description="Warn when a scheduler host's clock is further than this off the database clock "
        "(the scheduler follows the database clock).",
    )

    # --- metrics (the API serves /metrics itself; docs/METRICS.md) ---------------------------------
    metrics_host: str = Field(
        "127.0.0.1",
        description="Address the metrics ports of the worker, the scheduler and the webhook dispatcher bind "
        "(no authentication).",
    )
    worker_metrics_port: str | None = Field(
        None,
        pattern=r"^[0-9]{1,5}(-[0-9]{1,5})?$",
        description="`notee worker` serves Prometheus metrics on /metrics at this port; a range `9101-9110` takes "
        "the first free one (several workers per host), `0` any free port (logged). Unset: off.",
    )
    scheduler_metrics_port: str | None = Field(
        None,
        pattern=r"^[0-9]{1,5}(-[0-9]{1,5})?$",
        description="`notee scheduler`'s metrics port, as worker_metrics_port. Unset: off.",
    )
    webhooks_metrics_port: str | None = Field(
        None,
        pattern=r"^[0-9]{1,5}(-[0-9]{1,5})?$",
        description="`notee webhooks`' metrics port, as worker_metrics_port. Unset: off.",
    )

    heartbeat_file: str | None = Field(
        None,
        description="File `notee worker` and `notee scheduler` touch while healthy, read by "
        "`notee healthcheck worker|scheduler`. Unset: no heartbeat.",
    )
    process_heartbeat_s: float = Field(
        5.0,
        gt=0,
        le=60,
        description="Seconds between a process's beats in MySQL (`process_heartbeat`: the console's health page and "
        "`GET /v1/admin/processes`); a process is stale after 3 missed beats and 5 s.",
    )

    tracing: bool = Field(
        False,
        description="OpenTelemetry traces of publish -> task -> provider request, with the trace id in the "
        "logs (docs/DEPLOY.md \"Tracing\"); needs the tracing extra (pip install 'notee[tracing]').",
    )
    tracing_exporter: Literal["console", "otlp"] = Field(
        "otlp",
        description="Where spans go when this process sets up OpenTelemetry itself: otlp (needs "
        "opentelemetry-exporter-otlp-proto-http; OTEL_EXPORTER_OTLP_* configure it) or console (stdout).",
    )
    tracing_service_name: str = Field("notee", description="The service.name of this process's spans.")

    log_level: str = Field("INFO", description="Python logging level.")
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Log lines as text, or one JSON object per line (time, level, logger, message, "
        "request_id, job_id, service; the API's access log with method, path, status, duration_ms).",
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.api_tls_cert_file is None) != (self.api_tls_key_file is None):
            raise ValueError("NOTEE_API_TLS_CERT_FILE and NOTEE_API_TLS_KEY_FILE must be set together")
        return self

    @field_validator("worker_metrics_port", "scheduler_metrics_port", "webhooks_metrics_port")
    @classmethod
    def _port_range(cls, value: str | None) -> str | None:
        if value is not None:
            first, _, last = value.partition("-")
            lo, hi = int(first), int(last or first)
            if not (0 <= lo <= hi <= 65535) or (lo == 0 and hi != 0):
                raise ValueError("must be a port (0: any free one) or a range low-high of ports")
        return value

    @field_validator("admin_token")
    @classmethod
    def _admin_token_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_ADMIN_TOKEN_LEN:
            # The admin token rules every tenant: a short one could be guessed.
            raise ValueError(
                f"must be at least {MIN_ADMIN_TOKEN_LEN} characters (e.g. "
                "python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return value

    @field_validator("credentials_key", "credentials_old_keys")
    @classmethod
    def _fernet_keys(cls, value: SecretStr | list[SecretStr] | None) -> SecretStr | list[SecretStr] | None:
        for key in value if isinstance(value, list) else [value] if value is not None else []:
            try:
                Fernet(key.get_secret_value().encode("ascii"))
            except (ValueError, UnicodeEncodeError):
                raise ValueError("must be a Fernet key (32 url-safe base64-encoded bytes)") from None
        return value

    @field_validator("credentials_old_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value

    @field_validator("cassandra_hosts", "api_trusted_proxies", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [h.strip() for h in value.split(",") if h.strip()]
        return value

    @field_validator("api_trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        return [str(ipaddress.ip_network(item, strict=False)) for item in value]  # ValueError: neither
