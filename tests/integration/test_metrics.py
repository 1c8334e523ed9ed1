"""Prometheus metrics from every process (issue 16.1), scraped over HTTP from real `notee api`,
`notee worker` and `notee scheduler` processes and parsed with prometheus_client's parser:
counters move by exactly what happened, HTTP requests are labelled by route template, secrets never
appear, /metrics needs the admin token, and several workers of one host do not collide.

The rules of this topic that need no server are in tests/unit/test_metrics.py."""

from __future__ import annotations

import json
import re
import secrets
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import httpx

from notee.core import clock
from notee.core.metrics import BREAKER_STATES
from notee.store import jobs_sql, task_leases, ticks
from notee.store.mysql import db_now
from tests.support.fanout import job_progress, seed_topic, topic_job, topic_template, wait_lease_expired
from tests.support.metrics import Scrape, metric_names_in, scrape, worker_metrics_url
from tests.support.processes import Processes, free_port, subprocess_env, wait_http
from tests.support.registry import admin_headers, bearer, random_token
from tests.support.scheduler import tick_states
from tests.support.waiting import wait_for


def _service_with_key(api_url: str, settings, prefix: str = "MET") -> tuple[str, str]:
    service = prefix + secrets.token_hex(4).upper()
    r = httpx.post(
        api_url + "/v1/admin/services",
        json={"service": service, "display_name": "metrics"},
        headers=admin_headers(settings),
        timeout=30,
    )
    assert r.status_code == 201, r.text
    r = httpx.post(
        api_url + f"/v1/admin/services/{service}/api-keys", json={}, headers=admin_headers(settings), timeout=30
    )
    assert r.status_code == 201, r.text
    return service, r.json()["api_key"]


def test_api_metrics_by_route_template_with_rate_limits_and_no_secrets(
    processes: Processes, settings, migrated
) -> None:
    api = processes.api()
    admin_token = settings.admin_token.get_secret_value()
    service, key = _service_with_key(api.url, settings)

    # /metrics is the admin's: no token, a tenant key or a wrong token get the one error format
    for headers in ({}, bearer(key), bearer("x" * 40)):
        r = httpx.get(api.url + "/metrics", headers=headers, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", r.text

    before = scrape(api.url + "/metrics", admin_token)
    users_route = dict(method="GET", route="/v1/users/{user_id}")
    user_ids = [str(uuid.uuid4()) for _ in range(3)]
    for uid in user_ids:  # three different ids: one series, not three
        assert httpx.get(api.url + f"/v1/users/{uid}", headers=bearer(key), timeout=10).status_code == 404
    device_token = random_token("devtok")
    r = httpx.delete(api.url + f"/v1/users/{user_ids[0]}/devices/{device_token}", headers=bearer(key), timeout=10)
    assert r.status_code == 404
    bad = httpx.get(api.url + f"/v1/users/{user_ids[1]}", headers=bearer("nk_wrong_key"), timeout=10)
    assert bad.status_code == 401  # answered by the edge, before routing: still the route's template
    assert httpx.get(api.url + "/no/such/path", timeout=10).status_code == 404

    # the service's read limit: one request at once, then 429s
    r = httpx.put(
        api.url + f"/v1/admin/services/{service}/rate-limits/read",
        json={"rate": 0.01, "burst": 1},
        headers=admin_headers(settings),
        timeout=10,
    )
    assert r.status_code == 200, r.text
    statuses = [
        httpx.get(api.url + f"/v1/users/{user_ids[2]}", headers=bearer(key), timeout=10).status_code for _ in range(4)
    ]
    refused = statuses.count(429)
    assert refused >= 3 and set(statuses) <= {404, 429}, statuses

    after = scrape(api.url + "/metrics", admin_token)

    def moved(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert moved("notee_http_requests_total", **users_route, status="404") == 3 + statuses.count(404)
    assert moved("notee_http_requests_total", **users_route, status="401") == 1
    assert moved("notee_http_requests_total", **users_route, status="429") == refused
    assert (
        moved(
            "notee_http_requests_total", method="DELETE", route="/v1/users/{user_id}/devices/{token:path}", status="404"
        )
        == 1
    )
    assert moved("notee_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert moved("notee_http_request_duration_seconds_count", **users_route) == 3 + 1 + len(statuses)
    assert moved("notee_rate_limit_rejections_total", service=service, **{"class": "read"}) == refused
    # the first scrape itself was counted
    assert after.value("notee_http_requests_total", method="GET", route="/metrics", status="200") >= 1

    routes = {dict(labels)["route"] for (name, labels) in after.samples if name == "notee_http_requests_total"}
    assert all(r == "unmatched" or r.startswith("/") for r in routes), routes
    assert not any(uid in r for r in routes for uid in user_ids), routes
    # nk_<key id>_<secret>: the secret may itself contain "_" (token_urlsafe), so split twice only
    for secret in (key, key.split("_", 2)[2], admin_token, device_token, *user_ids):
        assert secret not in after.text
    assert after.has("notee_job_queue_depth") and after.has("notee_job_queue_oldest_age_seconds")
    assert after.has("process_cpu_seconds_total")  # the client's process collector


def test_metrics_live_on_the_admin_listener_when_the_listeners_are_split(
    processes: Processes, settings, migrated
) -> None:
    admin_port = free_port()
    api = processes.api("--admin-port", str(admin_port))
    admin_url = f"http://127.0.0.1:{admin_port}"
    wait_http(admin_url + "/healthz", proc=api)
    token = settings.admin_token.get_secret_value()
    tenant_side = httpx.get(api.url + "/metrics", headers=bearer(token), timeout=10)
    assert tenant_side.status_code == 404
    assert httpx.get(admin_url + "/metrics", timeout=10).status_code == 401
    admin_side = scrape(admin_url + "/metrics", token)
    # one registry per process: the tenant listener's requests are counted there too
    assert admin_side.value("notee_http_requests_total", method="GET", route="unmatched", status="404") >= 1


def test_worker_counts_pushes_retries_latency_claims_and_a_lease_takeover(
    processes: Processes, runtime, service_id, emulator
) -> None:
    n, dead = 30, 3
    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "metrics", n)
    emulator.fcm_tokens(UNREGISTERED=tokens[:dead])
    emulator.fault("fcm", 503, times=2)  # two pushes get a retryable answer first
    job = topic_job(runtime, service_id, key, "metrics")
    # a worker that claimed the task and died: its lease runs out, the next worker takes it over
    stale = task_leases.claim(runtime.sessions, owner="dead-worker", lease_s=1, services=[service_id])
    assert stale is not None and not stale.taken_over
    wait_lease_expired(runtime, stale)
    port = free_port()
    worker = processes.worker(service_id, lanes=1, NOTEE_WORKER_METRICS_PORT=str(port))
    wait_for(lambda: job_progress(runtime, job.job_id)[0].state == "done", timeout=90, what="job done")
    _, progress = job_progress(runtime, job.job_id)
    assert (progress.sent, progress.pruned, progress.failed) == (n - dead, dead, 0)

    m = scrape(worker_metrics_url(port))
    fcm = dict(provider="fcm", service=service_id)
    assert m.value("notee_pushes_total", **fcm, outcome="sent") == progress.sent
    assert m.value("notee_pushes_total", **fcm, outcome="invalid_token") == dead
    assert m.value("notee_pushes_total", **fcm, outcome="failed") == 0
    assert m.value("notee_push_retries_total", **fcm, cause="provider") == 2
    # one observed latency per provider answer: every push once, the two 503s once more
    assert m.value("notee_provider_response_seconds_count", provider="fcm") == n + 2
    assert m.value("notee_provider_response_seconds_bucket", provider="fcm", le="+Inf") == n + 2
    assert m.value("notee_http2_connections_opened_total", provider="fcm") >= 1
    assert m.value("notee_http2_open_streams", provider="fcm") == 0  # nothing in flight once the job is done
    assert m.value("notee_tasks_claimed_total") == 1
    assert m.value("notee_task_lease_takeovers_total") == 1
    assert m.has("notee_job_queue_depth") and m.has("notee_job_queue_running") and m.has("notee_job_queue_delayed")
    # the breaker that guarded the sends: one series per state, 1 for the one it is in
    assert [m.value("notee_circuit_breaker_state", provider="fcm", state=st) for st in BREAKER_STATES] == [1, 0, 0]
    assert not [name for (name, _) in m.samples if name.endswith("_created")]  # no _created series
    # the breaker that guarded the sends: one series per state, 1 for the one it is in
    assert [m.value("notee_circuit_breaker_state", provider="fcm", state=st) for st in BREAKER_STATES] == [1, 0, 0]
    assert not [name for (name, _) in m.samples if name.endswith("_created")]  # no _created series
    assert "took over" in worker.output()
    for token in tokens:
        assert token not in m.text


def test_the_job_queue_levels_follow_the_queue(processes: Processes, runtime, settings, service_id) -> None:
    """No worker serves this tenant: a new job's task waits (depth +1); a job scheduled for tomorrow
    is delayed (+1), not waiting; both leave the queue when cancelled."""
    api = processes.api()
    token = settings.admin_token.get_secret_value()
    key = topic_template(runtime, service_id)
    seed_topic(runtime, service_id, "news", key, "queue", 3)
    before = scrape(api.url + "/metrics", token)
    now_job = topic_job(runtime, service_id, key, "queue")
    with runtime.sessions.begin() as s:
        tomorrow = db_now(s) + timedelta(days=1)
    later_job = topic_job(runtime, service_id, key, "queue", send_at=tomorrow, idempotency_key="later")
    during = scrape(api.url + "/metrics", token)
    assert during.value("notee_job_queue_depth") - before.value("notee_job_queue_depth") == 1
    assert during.value("notee_job_queue_delayed") - before.value("notee_job_queue_delayed") == 1
    assert during.value("notee_job_queue_oldest_age_seconds") >= 0
    with runtime.sessions.begin() as s:
        assert jobs_sql.cancel_job(s, service_id, now_job.job_id)
        assert jobs_sql.cancel_job(s, service_id, later_job.job_id)
    after = scrape(api.url + "/metrics", token)
    assert after.value("notee_job_queue_depth") == before.value("notee_job_queue_depth")
    assert after.value("notee_job_queue_delayed") == before.value("notee_job_queue_delayed")


def test_workers_on_one_host_take_distinct_ports_of_a_range_or_any_free_port(
    processes: Processes, service_id, migrated
) -> None:
    first = free_port()
    spec = f"{first}-{first + 2}"
    a = processes.worker(service_id, name="worker-a", NOTEE_WORKER_METRICS_PORT=spec)
    b = processes.worker(service_id, name="worker-b", NOTEE_WORKER_METRICS_PORT=spec)
    c = processes.worker(service_id, name="worker-c", NOTEE_WORKER_METRICS_PORT="0")

    def port_of(proc) -> int:
        found = re.search(r"worker: metrics on http://127\.0\.0\.1:(\d+)/metrics", proc.output())
        return int(found.group(1)) if found else 0

    ports = [wait_for(lambda p=p: port_of(p), timeout=60, what=f"{p.name}'s metrics port") for p in (a, b, c)]
    assert ports[0] != ports[1] and {ports[0], ports[1]} <= {first, first + 1, first + 2}, ports
    assert ports[2] not in ports[:2]
    for port in ports:
        assert scrape(worker_metrics_url(port)).has("process_cpu_seconds_total")


def test_a_store_outage_is_counted_by_store(processes: Processes, settings, migrated) -> None:
    closed = free_port()  # nothing listens there
    api = processes.start(
        "api-nomysql",
        ["api", "--port", str(port := free_port())],
        env=subprocess_env(
            NOTEE_MYSQL_URL=f"mysql+pymysql://notee:notee@127.0.0.1:{closed}/notee_x", NOTEE_MYSQL_CONNECT_TIMEOUT_S="1"
        ),
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/openapi.json", proc=api)
    token = settings.admin_token.get_secret_value()
    before = scrape(url + "/metrics", token).value("notee_store_errors_total", store="mysql", kind="outage")
    for _ in range(3):
        r = httpx.get(
            url + "/v1/users/someone",
            headers=bearer(f"nk_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"),
            timeout=30,
        )
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable", r.text
    after = scrape(url + "/metrics", token)
    assert after.value("notee_store_errors_total", store="mysql", kind="outage") - before >= 3
    assert after.value("notee_store_errors_total", store="mysql", kind="error") == 0
    assert not after.has("notee_job_queue_depth")  # no figure rather than a wrong one while MySQL is down


def test_scheduler_counts_done_late_and_skipped_minutes_and_logs_json_without_apscheduler_info(
    processes: Processes, runtime, migrated
) -> None:
    namespace = "metrics-" + secrets.token_hex(4)
    with runtime.sessions.begin() as s:
        now = clock.aware_utc(db_now(s)).replace(second=0, microsecond=0)
    old = now - timedelta(minutes=20)  # the last minute this namespace ran: 20 minutes ago
    with runtime.sessions.begin() as s:
        assert ticks.claim(s, namespace=namespace, minute_utc=old, owner="earlier", lease_s=60)
    with runtime.sessions.begin() as s:
        assert ticks.finish(s, namespace=namespace, minute_utc=old, owner="earlier", state="done", jobs=0)
    port = free_port()
    sched = processes.start(
        "scheduler",
        ["scheduler"],
        env=subprocess_env(
            NOTEE_SCHEDULER_NAMESPACE=namespace,
            NOTEE_SCHEDULER_METRICS_PORT=str(port),
            NOTEE_LOG_FORMAT="json",
            NOTEE_LOG_LEVEL="INFO",
        ),
    )
    wait_http(worker_metrics_url(port), proc=sched)

    last: list[object] = []

    def agreed() -> tuple[Scrape, dict[str, int], dict[datetime, str]] | None:
        m = scrape(worker_metrics_url(port))
        states = tick_states(runtime, namespace)
        counts = {st: sum(1 for m_, v in states.items() if v == st and m_ != old) for st in ("done", "late", "skipped")}
        seen = {st: int(m.value("notee_scheduler_minutes_total", state=st)) for st in counts}
        last[:] = [seen, counts]
        with runtime.sessions() as s:
            minutes_since_old = int((clock.aware_utc(db_now(s)) - old).total_seconds() // 60)
        # every minute since the old one recorded (but the current one: a scheduler started just after
        # second 0 runs that minute at the next cron fire, or as a late minute then)
        caught_up = sum(counts.values()) >= minutes_since_old - 1
        return (m, counts, states) if seen == counts and caught_up else None

    try:
        m, counts, states = wait_for(agreed, timeout=90, what="the scheduler's counters to match its tick rows")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: metrics {last[0]}, tick rows {last[1]}") from None
    # 20 minutes back with a 10-minute grace: the 10 minutes inside the grace run late, the 9 before are skipped
    assert counts["late"] >= 9 and counts["skipped"] >= 8, counts
    newest = max(k for k, v in states.items() if v in ("done", "late"))
    assert m.value("notee_scheduler_last_minute_timestamp_seconds") == newest.timestamp()
    assert m.value("notee_scheduler_minute_lag_seconds") >= 0
    sched.stop()
    lines = [line for line in sched.output().splitlines() if line.strip()]
    assert lines
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert any(r["logger"].startswith("notee") for r in records)
    apscheduler_info = [r for r in records if r["logger"].startswith("apscheduler") and r["level"] == "INFO"]
    assert apscheduler_info == []


DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _dashboard_queries() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "notee-dashboard.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert len(queries) >= 20, "the dashboard lost its queries"
    return queries


def test_every_metric_of_the_dashboard_is_exposed_by_a_running_process(
    processes: Processes, runtime, settings, service_id, emulator
) -> None:
    api = processes.api()
    worker_port, scheduler_port, webhooks_port = free_port(), free_port(), free_port()
    processes.worker(service_id, NOTEE_WORKER_METRICS_PORT=str(worker_port))
    dispatcher = processes.start(
        "webhooks", ["webhooks"], subprocess_env(NOTEE_WEBHOOKS_METRICS_PORT=str(webhooks_port))
    )
    scheduler = processes.start(
        "scheduler",
        ["scheduler"],
        env=subprocess_env(
            NOTEE_SCHEDULER_NAMESPACE="metrics-" + secrets.token_hex(4),
            NOTEE_SCHEDULER_METRICS_PORT=str(scheduler_port),
        ),
    )
    # a publish through the API, fanned out by the worker to the emulator
    key = topic_template(runtime, service_id)
    seed_topic(runtime, service_id, "news", key, "dash", 5)
    r = httpx.post(
        api.url + f"/v1/admin/services/{service_id}/api-keys", json={}, headers=admin_headers(settings), timeout=30
    )
    assert r.status_code == 201, r.text
    r = httpx.post(
        api.url + "/v1/topics/news/dash/publish",
        json={"variables": {"name": "x"}},
        headers=bearer(r.json()["api_key"]),
        timeout=30,
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    wait_for(lambda: job_progress(runtime, job_id)[0].state == "done", timeout=90, what="the published job done")
    wait_http(worker_metrics_url(scheduler_port), proc=scheduler)
    wait_http(worker_metrics_url(webhooks_port), proc=dispatcher)

    token = settings.admin_token.get_secret_value()
    scrapes = {
        "api": scrape(api.url + "/metrics", token),
        "worker": scrape(worker_metrics_url(worker_port)),
        "scheduler": scrape(worker_metrics_url(scheduler_port)),
        "webhooks": scrape(worker_metrics_url(webhooks_port)),
    }
    assert scrapes["worker"].value("notee_pushes_total", provider="fcm", service=service_id, outcome="sent") == 5
    exposed = set().union(*(s.exposed for s in scrapes.values()))
    named = set().union(*(metric_names_in(q) for q in _dashboard_queries()))
    assert named, "no metric name found in the dashboard"
    assert sorted(named - exposed) == []
    # the check can fail: a misspelt name is not exposed
    assert "notee_pushes_sent_total" not in exposed
