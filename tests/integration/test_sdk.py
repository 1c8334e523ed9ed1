"""The Python SDK (clients/python, package ``notee_sdk``) against a real `notee api` process, a
real `notee worker` and the emulator: the calls a service backend makes, typed answers, errors in the
error format, Idempotency-Keys on publishes, ``wait()`` with progress, and the client's own rules
(its dependencies, its generated methods, one operation per API endpoint).

The rules of this topic that need no server are in tests/unit/test_sdk.py."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import notee_sdk
import pytest
from notee_sdk import AsyncClient, Client, models

from notee.core.version import VERSION
from tests.support.emulator import deliveries_per_token
from tests.support.registry import fcm_service_account, random_token
from tests.support.tenants import new_service_id
from tests.support.waiting import wait_for

SDK = Path(__file__).resolve().parents[2] / "clients" / "python"


@pytest.fixture()
def admin(api_process, settings):
    with Client(api_process.url, admin_token=settings.admin_token.get_secret_value(), max_retries=0) as c:
        yield c


@pytest.fixture()
def tenant(admin, service_id, api_process):
    """A new service with FCM credentials and a client holding its API key."""
    admin.create_service(service_id, f"SDK {service_id}", timezone="Europe/Berlin")
    key = admin.create_api_key(service_id, label="sdk")
    admin.put_fcm_credentials(service_id, fcm_service_account())
    with Client(api_process.url, api_key=key.api_key) as c:
        yield service_id, c


def test_a_publish_from_the_sdk_reaches_the_device_and_wait_reports_progress(processes, tenant, emulator, tmp_path):
    service, notee = tenant
    user = notee.put_user("alice-" + secrets.token_hex(4), name="Alice")
    assert isinstance(user, models.User) and user.name == "Alice"
    token = random_token("sdk")
    device = notee.add_device(user.user_id, token, "AOS", region="DE")
    assert device.token == token and device.os == "AOS"
    template = notee.put_template("TOPIC", "news", title="Hi {{team}}", body="Match day")
    assert template.method == "TOPIC" and template.version >= 1
    assert notee.subscribe_topic(user.user_id, "news", "world cup #1?").status == "subscribed"

    accepted = notee.publish_topic("news", "world cup #1?", variables={"team": "Reds"})
    seen: list[models.Job] = []
    worker = processes.worker(service)
    try:
        job = notee.wait(accepted.job_id, on_progress=seen.append, poll_interval=0.2, timeout=120)
    finally:
        worker.stop(timeout=30)
    assert job.state == "done", job
    assert (job.targeted, job.sent, job.failed, job.pruned) == (1, 1, 0, 0)
    assert seen and seen[-1] == job and all(isinstance(j, models.Job) for j in seen)
    assert deliveries_per_token(emulator, [token], api="fcm") == {token: 1}
    last = emulator.last_request(token)
    assert "Hi Reds" in str(last), last


def test_every_publish_carries_an_idempotency_key(tenant):
    _, notee = tenant
    notee.put_template("TOPIC", "promo", title="Sale", body="Now")
    first = notee.publish_topic("promo", "all", idempotency_key="order-42")
    again = notee.publish_topic("promo", "all", idempotency_key="order-42")
    assert again.job_id == first.job_id  # the caller's key makes a repeat harmless
    # Without a key the SDK makes a fresh one per call: two calls are two jobs, each retryable.
    a, b = notee.publish_topic("promo", "all"), notee.publish_topic("promo", "all")
    assert len({a.job_id, b.job_id, first.job_id}) == 3
    op = notee_sdk.Op  # the key is on the operation itself, so every retry of a call reuses it
    from notee_sdk import _ops

    publish = _ops.publish_topic("promo", "all")
    assert isinstance(publish, op) and publish.headers["Idempotency-Key"].startswith("sdk-") and publish.repeatable


def test_errors_come_back_typed_with_the_servers_details(tenant, api_process):
    _, notee = tenant
    with pytest.raises(notee_sdk.NotFound) as missing:
        notee.get_user("00000000-0000-4000-8000-000000000000")
    assert missing.value.status == 404 and missing.value.code
    user = notee.put_user("bob-" + secrets.token_hex(4))
    with pytest.raises(notee_sdk.ValidationFailed) as invalid:
        notee.add_device(user.user_id, "short", "AOS")  # tokens are 8-512 printable characters
    assert invalid.value.status == 422 and invalid.value.details
    assert notee.list_devices(user.user_id) == []  # nothing was written
    with (
        Client(api_process.url, api_key="nk_nokey_" + secrets.token_hex(16), max_retries=0) as stranger,
        pytest.raises(notee_sdk.Unauthorized),
    ):
        stranger.list_templates()


def test_the_async_client_runs_the_same_operations(tenant, api_process):
    _service, sync = tenant
    key = sync._policy.api_key

    async def scenario() -> tuple[list[models.Subscription], list[models.Template], models.Subscribed]:
        async with AsyncClient(api_process.url, api_key=key) as notee:
            user = await notee.put_user("carol-" + secrets.token_hex(4))
            await notee.add_device(user.user_id, random_token("async"), "IOS")
            await notee.put_template("CYCLE", "daily", title="Good morning", body="Your summary")
            subscribed = await notee.subscribe_cycle(user.user_id, "daily", days=["MON", "FRI"], hour=9, minute=30)
            subs = await notee.list_subscriptions(user.user_id)
            templates = await notee.list_templates()
            listed = [u.user_id async for u in notee.iter_users(page_size=1)]  # follows next_cursor
            assert user.user_id in listed and len(listed) == len(set(listed))
            await notee.unsubscribe_cycle(user.user_id, "daily")
            assert await notee.list_subscriptions(user.user_id) == []
            await notee.delete_user(user.user_id)
            with pytest.raises(notee_sdk.NotFound):
                await notee.get_user(user.user_id)
            return subs, templates, subscribed

    subs, templates, subscribed = asyncio.run(scenario())
    assert subscribed.schedule and "09:30" in subscribed.schedule and "Europe/Berlin" in subscribed.schedule
    assert [(s.method, s.type) for s in subs] == [("CYCLE", "daily")]
    assert subs[0].schedule is not None and subs[0].schedule.days == ["MON", "FRI"]
    assert [t.type for t in templates] == ["daily"]


def test_every_api_operation_has_an_sdk_method_of_the_same_name(app):
    """The OpenAPI document is the list of endpoints; each operationId (``publishTopic``) is an SDK
    operation in snake case (``publish_topic``) sending the same method to the same path."""
    from notee_sdk import _ops

    from notee.api.openapi import snake

    api = {
        snake(op["operationId"]): (method.upper(), path)
        for path, item in app.openapi()["paths"].items()
        for method, op in item.items()
    }
    sdk = {
        name: _route_of(getattr(_ops, name))
        for name in dir(_ops)
        if not name.startswith("_")
        and str(getattr(getattr(_ops, name), "__annotations__", {}).get("return", "")).startswith("Op[")
    }
    assert sorted(set(api) - set(sdk)) == [], "endpoints without an SDK operation"
    assert sorted(set(sdk) - set(api)) == [], "SDK operations the API does not have"
    assert {name: sdk[name] for name in api} == api


def _route_of(fn) -> tuple[str, str]:
    """(METHOD, templated path) of an operation, found by calling it with placeholder arguments."""
    import inspect

    args = {}
    for p in inspect.signature(fn).parameters.values():
        if p.default is inspect.Parameter.empty:
            annotation = str(p.annotation)
            args[p.name] = ["x"] if "Sequence" in annotation else {} if "Mapping" in annotation else f"{{{p.name}}}"
    op = fn(**args)
    return op.method, op.path.replace("%7B", "{").replace("%7D", "}")


def test_the_generated_methods_are_current():
    out = subprocess.run(
        [sys.executable, str(SDK / "tools" / "gen_methods.py"), "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_jobs_are_listed_newest_first_with_filters_and_a_cursor(tenant, admin):
    service, notee = tenant
    notee.put_template("TOPIC", "alpha", title="A", body="a")
    notee.put_template("TOPIC", "beta", title="B", body="b")
    made = [notee.publish_topic("alpha", f"t{i}").job_id for i in range(3)] + [notee.publish_topic("beta", "t").job_id]
    listed = list(notee.iter_jobs(page_size=2))  # two pages of two
    assert [j.job_id for j in listed] == made[::-1]
    first = notee.list_jobs(limit=2)
    assert len(first.items) == 2 and first.next_cursor is not None
    assert [j.job_id for j in notee.iter_jobs(type="alpha")] == made[2::-1]
    assert [j.job_id for j in notee.iter_jobs(state="queued", method="TOPIC")] == made[::-1]
    assert list(notee.iter_jobs(state="done")) == []
    with pytest.raises(notee_sdk.ValidationFailed) as bad:
        notee.list_jobs(cursor="not-a-cursor")
    assert bad.value.details and bad.value.details[0]["loc"] == ["query", "cursor"]
    assert service in [s.service for s in admin.list_services()]


def test_the_admin_lists_the_processes_and_a_client_without_the_admin_token_cannot(admin, api_process):
    def live_api() -> list[models.Process]:
        return [p for p in admin.list_processes() if p.kind == "api" and not p.stale]

    found = wait_for(live_api, timeout=30, what="the test API process's heartbeat")
    assert all(p.breakers is None and p.age_s >= 0 for p in found)
    # The SDK sends only the admin token to /v1/admin/ routes (a service key's own refusal there:
    # tests/integration/test_process_heartbeats.py); admin_token="" overrides this environment's.
    other = Client(api_process.url, api_key="nk_unused", admin_token="", max_retries=0)
    with other, pytest.raises(notee_sdk.Unauthorized):
        other.list_processes()


def test_jobs_are_filtered_by_creation_time_given_in_rfc_3339(tenant):
    from datetime import datetime, timedelta, timezone

    _, notee = tenant
    notee.put_template("TOPIC", "gamma", title="G", body="g")
    job = notee.publish_topic("gamma", "t").job_id
    now = datetime.now(UTC)
    assert [j.job_id for j in notee.list_jobs(created_from=now - timedelta(minutes=5)).items] == [job]
    assert notee.list_jobs(created_to=now - timedelta(minutes=5)).items == []
    assert [
        j.job_id
        for j in notee.list_jobs(
            created_from=(now - timedelta(minutes=5)).astimezone(timezone(timedelta(hours=9)))
        ).items
    ] == [job]  # any offset means the same instant
    for bad in ("0.5", "2026-11-30T09:00:00", "yesterday"):
        with pytest.raises(notee_sdk.ValidationFailed):
            notee.call(notee_sdk.Op("GET", "/v1/jobs", lambda b: b, params={"created_from": bad}))


def test_dead_letters_are_listed_and_replayed_through_the_sdk(tenant, admin):
    service, notee = tenant
    assert list(notee.iter_dead_letters()) == []
    page = notee.list_dead_letters(limit=10)
    assert page.items == [] and page.next_before_id is None
    assert notee.replay_dead_letters().replayed == 0
    assert admin.admin_list_dead_letters(service).items == []


def test_put_user_again_without_a_field_keeps_what_was_set(tenant):
    """An upsert never wipes what it was not given: put_user with only the id keeps the name, the
    locale, the zone and the quiet hours set before (the SDK used to send name='' each time)."""
    _, c = tenant
    first = c.put_user(
        "keep-me",
        name="Alice",
        locale="de-DE",
        timezone="Europe/Berlin",
        quiet_hours={"start": "22:00", "end": "07:00"},
    )
    again = c.put_user("keep-me")
    assert again.user_id == first.user_id
    got = c.get_user(first.user_id)
    assert (got.name, got.locale, got.timezone) == ("Alice", "de-DE", "Europe/Berlin")
    assert got.quiet_hours == {"start": "22:00", "end": "07:00"}
    renamed = c.put_user("keep-me", name="")
    assert renamed.name == "" and renamed.locale == "de-DE"  # an explicit value is still set


def test_liveness_and_readiness_carry_the_version(api_process):
    with Client(api_process.url, max_retries=0) as c:
        live, ready = c.live(), c.ready()
    assert (live.status, live.version) == ("ok", VERSION)
    assert (ready.status, ready.version, ready.mysql, ready.cassandra) == ("ok", VERSION, "ok", "ok")


def test_the_sdk_names_a_user_by_the_services_own_id(tenant):
    _, c = tenant
    user = c.put_user("carol-7", name="Carol")
    token = random_token("byid")
    c.add_device(notee_sdk.by_service_id("carol-7"), token=token, os="AOS")
    assert [d.token for d in c.list_devices(user.user_id)] == [token]
    assert c.get_user(notee_sdk.by_service_id("carol-7")).user_id == user.user_id
    with pytest.raises(ValueError, match="cannot name a user in a path"):
        notee_sdk.by_service_id("a/b")


def test_topics_and_webhook_deliveries_are_walked_a_page_at_a_time(tenant, admin, api_process):
    """iter_topics follows next_cursor to the last page (three topics on pages of two);
    iter_webhook_deliveries walks an endpoint's deliveries, and another service's endpoint is 404."""
    _, c = tenant
    c.put_template("TOPIC", "news", title="Hi", body="b")
    for n, topics in enumerate((["a", "b", "c"], ["b", "c"], ["c"])):
        user = c.put_user(f"reader-{n}")
        for topic in topics:
            c.subscribe_topic(user.user_id, "news", topic)
    counts = {(t.type, t.topic): t.subscribers for t in c.iter_topics(page_size=2)}
    assert counts == {("news", "a"): 1, ("news", "b"): 2, ("news", "c"): 3}
    assert [t.topic for t in c.iter_topics(type="other")] == []
    endpoint = c.create_webhook("https://hooks.example.com/sdk")
    assert list(c.iter_webhook_deliveries(endpoint.endpoint_id, page_size=1)) == []
    other = new_service_id()
    admin.create_service(other, "another", timezone="UTC")
    key = admin.create_api_key(other, label="o").api_key
    with Client(api_process.url, api_key=key) as stranger, pytest.raises(notee_sdk.NotFound):
        list(stranger.iter_webhook_deliveries(endpoint.endpoint_id))
