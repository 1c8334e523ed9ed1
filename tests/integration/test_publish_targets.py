"""The general publish (docs/AUDIENCES.md): POST /v1/publish/{type} to a condition over topics or a
list of users (and platforms on any target), through the real API, a real worker and the emulator:
who receives it, at most once per device; and the job machinery every target shares (idempotency,
send_at, cancel, local time and quiet hours, locale variants, progress, webhooks, dead letters)."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from notee.domain import webhooks
from notee.domain.credentials import credentials_box
from notee.store import webhooks_sql
from notee.usecases import planning
from notee.usecases.audience_publish import Publish, publish_to
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import count_rows, run_worker_until_idle
from tests.support.logscan import remember_secret
from tests.support.registry import new_service, new_template, random_token

pytestmark = pytest.mark.tenant(credentials=True, timezone="Asia/Seoul")


@pytest.fixture()
def tenant(tenant):
    """The family's tenant with a TOPIC and a SINGLE template ``news``."""
    tenant.template("TOPIC", "news", title="Hello {{name}}", body="Body", defaults={"name": "you"})
    tenant.template("SINGLE", "news", title="Single {{name}}", body="Body", defaults={"name": "you"})
    return tenant


def _member(client, headers, topics, os_="AOS", service_user_id=None, token=None):
    """A user with one device subscribed to ``topics``: (user_id, token)."""
    token = token or random_token(os_.lower())
    r = client.put(f"/v1/users/{service_user_id or 'm-' + token[-12:]}", json={"name": "m"}, headers=headers)
    assert r.status_code in (200, 201), r.text
    user = r.json()["user_id"]
    d = client.post(f"/v1/users/{user}/devices", json={"token": token, "os": os_}, headers=headers)
    assert d.status_code in (200, 201), d.text
    for topic in topics:
        s = client.put(f"/v1/users/{user}/subscriptions/topic/news/{topic}", headers=headers)
        assert s.status_code in (200, 201), s.text
    return user, token


def _publish(client, headers, body, key=None, type_="news"):
    h = dict(headers) | ({"Idempotency-Key": key} if key else {})
    return client.post(f"/v1/publish/{type_}", json=body, headers=h)


def _status(client, headers, job_id):
    return client.get(f"/v1/jobs/{job_id}", headers=headers).json()


def test_a_condition_reaches_the_devices_it_holds_for_each_once(client, tenant, emulator, emu_runtime):
    service, headers = tenant
    only_a = _member(client, headers, ["a"])[1]
    only_b = _member(client, headers, ["b"])[1]
    both = _member(client, headers, ["a", "b"])[1]
    a_and_c = _member(client, headers, ["a", "c"])[1]
    none = _member(client, headers, ["c"])[1]
    tokens = [only_a, only_b, both, a_and_c, none]

    r = _publish(client, headers, {"condition": "'a' in topics && !('b' in topics)"})
    assert r.status_code == 202, r.text
    job = r.json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, tokens) == {only_a: 1, only_b: 0, both: 0, a_and_c: 1, none: 0}
    status = _status(client, headers, job)
    assert status["state"] == "done" and (status["targeted"], status["sent"]) == (2, 2), status
    assert status["target"]["walks"][0]["topic"] == "a" and len(status["target"]["walks"]) == 1

    # an OR walks both topics; a device in both gets it once
    r = _publish(client, headers, {"condition": "\"a\" in topics || 'b' in topics"})
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, tokens) == {only_a: 2, only_b: 1, both: 1, a_and_c: 2, none: 0}
    status = _status(client, headers, r.json()["job_id"])
    assert [w["topic"] for w in status["target"]["walks"]] == ["a", "b"]
    assert (status["state"], status["targeted"]) == ("done", 4), status


def test_platforms_narrow_a_topic_a_condition_and_a_user_list(client, tenant, emulator, emu_runtime):
    service, headers = tenant
    _ios_user, ios = _member(client, headers, ["p"], "IOS", service_user_id="p-ios")
    _aos_user, aos = _member(client, headers, ["p"], "AOS", service_user_id="p-aos")
    for body in (
        {"topic": "p", "platforms": ["IOS"]},
        {"condition": "'p' in topics", "platforms": ["IOS"]},
        {"users": ["p-ios", "p-aos"], "platforms": ["IOS"]},
    ):
        assert _publish(client, headers, body).status_code == 202
    r = client.post("/v1/topics/news/p/publish", json={"platforms": ["IOS", "IOS"]}, headers=headers)
    assert r.status_code == 202, r.text
    run_worker_until_idle(emu_runtime, [service])
    got = deliveries_per_token(emulator, [ios, aos])
    assert got == {ios: 4, aos: 0}, (got, emulator.deliveries_of([ios, aos]))
    assert _status(client, headers, r.json()["job_id"])["target"] == {"topic": "p", "platforms": ["IOS"]}
    assert client.post("/v1/topics/news/p/publish", json={"platforms": ["WATCH"]}, headers=headers).status_code == 422


def test_a_user_list_reaches_its_users_devices_once_and_counts_unknown_ids(client, tenant, emulator, emu_runtime):
    service, headers = tenant
    _, t1 = _member(client, headers, [], service_user_id="list-1")
    _, t2 = _member(client, headers, [], "IOS", service_user_id="list-2")
    shared = random_token("shared")  # one device two listed users hold: sent once
    _member(client, headers, [], service_user_id="list-3", token=shared)
    _member(client, headers, [], service_user_id="list-4", token=shared)
    _, outside = _member(client, headers, [], service_user_id="not-listed")
    r = _publish(client, headers, {"users": ["list-1", "list-2", "list-3", "list-4", "list-1", "ghost", "ghost-2"]})
    assert r.status_code == 202, r.text
    assert r.json()["unknown_users"] == 2 and r.json()["state"] == "queued"
    run_worker_until_idle(emu_runtime, [service], fetch_size=2)  # pages of 2: the checkpointed key resumes
    assert deliveries_per_token(emulator, [t1, t2, shared, outside]) == {t1: 1, t2: 1, shared: 1, outside: 0}
    status = _status(client, headers, r.json()["job_id"])
    assert (status["state"], status["targeted"], status["sent"], status["tasks"]) == ("done", 3, 3, 1), status
    assert status["target"]["users"]["count"] == 6
    # a SINGLE template may address a user list; a condition takes TOPIC templates only
    single = _publish(client, headers, {"users": ["list-1"], "method": "SINGLE"})
    assert single.status_code == 202, single.text
    run_worker_until_idle(emu_runtime, [service])
    assert "Single you" in str(emulator.last_request(t1))


def test_a_long_user_list_is_one_task_per_hex_digit_each_sent_once(
    client, runtime, tenant, emulator, emu_runtime, monkeypatch
):
    service, headers = tenant
    monkeypatch.setattr(planning, "ONE_TASK_USERS", 2)  # three users are a long list here
    tokens = [_member(client, headers, [], service_user_id=f"bulk-{i}")[1] for i in range(3)]
    r = _publish(client, headers, {"users": ["bulk-0", "bulk-1", "bulk-2"]})
    assert r.status_code == 202 and r.json()["unknown_users"] == 0, r.text
    status = _status(client, headers, r.json()["job_id"])
    assert status["tasks"] == 16
    with runtime.sessions() as s:
        ranges = s.execute(
            text("SELECT slot_from, slot_to FROM fanout_task WHERE job_id = :j ORDER BY task_no"),
            {"j": r.json()["job_id"]},
        ).all()
    assert ranges[0] == (0, 15) and ranges[-1] == (240, 255)
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))  # every slot, once
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, tokens) == dict.fromkeys(tokens, 1)


@pytest.mark.parametrize(
    "body, where",
    [
        ({}, ["body"]),
        ({"topic": "a", "condition": "'a' in topics"}, ["body"]),
        ({"condition": "'a' in topics &&"}, ["body", "condition"]),
        ({"condition": "!('a' in topics)"}, ["body", "condition"]),
        ({"condition": "'a' in topics", "method": "SINGLE"}, ["body", "method"]),
        ({"topic": "a", "method": "SINGLE"}, ["body", "method"]),
        ({"users": []}, ["body", "users"]),
        ({"users": ["x"] * 20_001}, ["body", "users"]),
        ({"users": ["x"], "platforms": []}, ["body", "platforms"]),
        ({"users": ["x"], "extra": 1}, ["body", "extra"]),
        ({"topic": "a\u0001"}, ["body", "topic"]),
        ({"users": ["x"], "variables": {"name": 5}}, ["body", "variables", "name"]),
    ],
)
def test_a_bad_general_publish_is_422_naming_the_part_and_writes_nothing(client, tenant, body, where):
    service, headers = tenant
    r = _publish(client, headers, body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_input"
    assert any(d["loc"][: len(where)] == where for d in error["details"]), error
    assert count_rows(client.app.state.runtime, service) == (0, 0)


def test_a_condition_over_a_topic_too_large_to_load_is_422(client, tenant):
    service, headers = tenant
    _member(client, headers, ["a", "big"])
    _member(client, headers, ["big"])
    runtime = client.app.state.runtime
    cap = runtime.settings.condition_members_max
    runtime.settings.condition_members_max = 1
    try:
        r = _publish(client, headers, {"condition": "'a' in topics && !('big' in topics)"})  # loads 'big' (2)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"][0]["ctx"] == {"topic": "big", "subscribers": 2, "max": 1}
        assert count_rows(runtime, service) == (0, 0)
        walked = _publish(client, headers, {"condition": "'big' in topics && !('a' in topics)"})  # loads 'a' (1)
        assert walked.status_code == 202, walked.text
    finally:
        runtime.settings.condition_members_max = cap


def test_another_tenants_users_are_unknown_and_its_jobs_404(
    client, runtime, settings, tenant, service_id, emulator, emu_runtime
):
    service, headers = tenant
    other = new_service(client, settings, service_id + "X", credentials=True)
    _, mine = _member(client, headers, [], service_user_id="same-id")
    job = _publish(client, headers, {"users": ["same-id"]}).json()["job_id"]
    assert client.get(f"/v1/jobs/{job}", headers=other).status_code == 404
    assert client.post(f"/v1/jobs/{job}/cancel", headers=other).status_code == 404
    assert _publish(client, other, {"users": ["same-id"]}).status_code == 404  # no template there
    new_template(client, other, "TOPIC", "news", title="t", body="b")
    theirs = _publish(client, other, {"users": ["same-id"]})
    assert theirs.status_code == 202 and theirs.json()["unknown_users"] == 1  # my user is not theirs
    _segment(runtime, service_id + "X", "theirs", PRO)  # another tenant's segment is no segment of mine
    r = _publish(client, headers, {"segments": {"include": ["theirs"]}})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["type"] == "unknown_segment"
    run_worker_until_idle(emu_runtime, [service, service_id + "X"])
    assert deliveries_per_token(emulator, [mine]) == {mine: 1}
    assert _status(client, other, theirs.json()["job_id"])["targeted"] == 0


def test_idempotency_send_at_and_cancel_work_for_a_condition(client, runtime, tenant, emulator, emu_runtime):
    service, headers = tenant
    _, token = _member(client, headers, ["i"])
    body = {"condition": "'i' in topics"}
    first = _publish(client, headers, body, key="cond-1")
    assert first.status_code == 202, first.text
    assert _publish(client, headers, body, key="cond-1").json()["job_id"] == first.json()["job_id"]
    changed = _publish(client, headers, {"condition": "'i' in topics || 'j' in topics"}, key="cond-1")
    assert changed.status_code == 422 and changed.json()["error"]["details"][0]["loc"] == ["header", "Idempotency-Key"]
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    scheduled = _publish(client, headers, body | {"send_at": later})
    assert scheduled.json()["state"] == "scheduled", scheduled.text
    _member(client, headers, [], service_user_id="to-cancel")
    cancelled = _publish(client, headers, {"users": ["to-cancel"]})
    assert client.post(f"/v1/jobs/{cancelled.json()['job_id']}/cancel", headers=headers).json()["state"] == "cancelled"
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, [token]) == {token: 1}  # the first job only
    assert _status(client, headers, scheduled.json()["job_id"])["state"] == "scheduled"


def test_quiet_hours_and_local_time_plan_a_user_list_as_a_topic(client, runtime, tenant, emulator, emu_runtime):
    service, headers = tenant
    r = client.put(
        "/v1/templates/TOPIC/news", json={"title": "News", "body": "b", "quiet_hours": "hold"}, headers=headers
    )
    assert r.status_code in (200, 201), r.text
    awake = _member(client, headers, [], service_user_id="q-awake")[1]
    r = client.put(
        "/v1/users/q-asleep", json={"name": "q", "quiet_hours": {"start": "22:00", "end": "07:00"}}, headers=headers
    )
    asleep_user = r.json()["user_id"]
    asleep = random_token("asleep")
    client.post(f"/v1/users/{asleep_user}/devices", json={"token": asleep, "os": "AOS"}, headers=headers)
    at = datetime(2026, 11, 29, 14, 30)  # simulated, in the past: 23:30 in Seoul
    with runtime.sessions.begin() as s:
        job = publish_to(runtime, s, Publish(service, "news", {"users": ["q-awake", "q-asleep"]}, at=at)).job
    assert [p["at"] for p in job.target["parts"]] == ["2026-11-29T14:30:00+00:00", "2026-11-29T22:00:00+00:00"]
    assert "groups" not in job.target  # a MySQL walk reads its page's clocks
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, [awake, asleep]) == {awake: 1, asleep: 1}
    with runtime.sessions() as s:
        sent = dict(s.execute(text("SELECT task_no, sent FROM fanout_task WHERE job_id = :j"), {"j": job.job_id}).all())
    assert sent == {0: 1, 1: 1}  # the sleeper in the part released at 07:00 KST
    local = _publish(client, headers, {"condition": "'x' in topics", "local_time": "09:00"})
    assert local.status_code == 202, local.text
    assert _status(client, headers, local.json()["job_id"])["target"]["local_time"] == "09:00"


def test_locale_variants_dead_letters_and_webhooks_for_a_user_list(client, runtime, tenant, emulator, emu_runtime):
    service, headers = tenant
    variants = {"ko": {"title": "안녕", "body": "새 소식"}}
    r = client.put(
        "/v1/templates/TOPIC/news", json={"title": "Hello", "body": "b", "variants": variants}, headers=headers
    )
    assert r.status_code in (200, 201), r.text
    r = client.put("/v1/users/loc-ko", json={"name": "k", "locale": "ko-KR"}, headers=headers)
    korean = random_token("ko")
    client.post(f"/v1/users/{r.json()['user_id']}/devices", json={"token": korean, "os": "AOS"}, headers=headers)
    english = _member(client, headers, [], service_user_id="loc-en")[1]
    broken = _member(client, headers, [], service_user_id="loc-broken")[1]
    emulator.fault("fcm", 401, match=broken, times=5, code="THIRD_PARTY_AUTH_ERROR")  # failed, not pruned
    settings = runtime.settings.model_copy(update={"webhook_allow_private_addresses": True})
    with runtime.sessions.begin() as s:
        endpoint = webhooks.create_endpoint(
            s,
            credentials_box(settings),
            settings,
            service,
            url="https://127.0.0.1:9/hook",
            events=None,
            description=None,
        )
    remember_secret(endpoint.secret)
    r = _publish(client, headers, {"users": ["loc-ko", "loc-en", "loc-broken"]})
    job = r.json()["job_id"]
    run_worker_until_idle(emu_runtime, [service])
    assert "안녕" in str(emulator.last_request(korean)) and "Hello" in str(emulator.last_request(english))
    status = _status(client, headers, job)
    assert (status["state"], status["sent"], status["failed"]) == ("done", 2, 1), status
    dead = client.get("/v1/dead-letters", headers=headers).json()["items"]
    assert [d["job_id"] for d in dead if d["device_token"] == broken] == [job]
    with runtime.sessions() as s:
        events = webhooks_sql.list_deliveries(s, service, endpoint.endpoint.endpoint_id, limit=50)
    assert any(job in str(e) and "job.finished" in str(e) for e in events), events


def _tag(runtime, service, user_id, key, value):
    with runtime.sessions.begin() as s:
        s.execute(
            text(
                "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, updated_at)"
                " VALUES (:s, :u, :k, 's', :v, UTC_TIMESTAMP(6))"
            ),
            {"s": service, "u": user_id, "k": key, "v": value},
        )


def _segment(runtime, service, name, filter_):
    with runtime.sessions.begin() as s:
        s.execute(
            text(
                "INSERT INTO segment (service, name, filter, created_at, updated_at)"
                " VALUES (:s, :n, :f, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
                " ON DUPLICATE KEY UPDATE filter = VALUES(filter)"
            ),
            {"s": service, "n": name, "f": json.dumps(filter_)},
        )


PRO = [[{"tag": "plan", "op": "=", "value": "pro"}]]


def test_a_filter_reaches_its_users_devices_each_once(client, runtime, tenant, emulator, emu_runtime):
    service, headers = tenant
    pro_user, pro = _member(client, headers, [], service_user_id="f-pro")
    ios_user, pro_ios = _member(client, headers, [], "IOS", service_user_id="f-pro-ios")
    free_user, free = _member(client, headers, [], service_user_id="f-free")
    shared = random_token("shared")  # two pro users share a device: sent once
    shared_users = [_member(client, headers, [], service_user_id=f"f-sh{i}", token=shared)[0] for i in (1, 2)]
    for user in (pro_user, ios_user, *shared_users):
        _tag(runtime, service, user, "plan", "pro")
    _tag(runtime, service, free_user, "plan", "free")
    r = _publish(client, headers, {"filter": PRO, "method": "SINGLE"})
    assert r.status_code == 202, r.text
    aos = _publish(client, headers, {"filter": PRO, "platforms": ["AOS"]})
    run_worker_until_idle(emu_runtime, [service], fetch_size=1)  # a page a device: every checkpoint resumes
    got = deliveries_per_token(emulator, [pro, pro_ios, free, shared])
    assert got == {pro: 2, pro_ios: 1, free: 0, shared: 2}, got
    status = _status(client, headers, r.json()["job_id"])
    assert (status["state"], status["targeted"], status["tasks"]) == ("done", 3, 16), status
    assert _status(client, headers, aos.json()["job_id"])["targeted"] == 2


def test_a_filter_sends_each_shared_token_once_whoever_else_holds_it(client, runtime, tenant, emulator, emu_runtime):
    """Tokens held by several users (the walk marks them as it reads, then keeps the lowest matching
    holder's row): five pro users' token, a pro and a free user's, and a pro user's own token, each
    sent exactly once, with pages of one device and of many (the marks of earlier pages kept)."""
    service, headers = tenant
    five = random_token("five")
    mixed = random_token("mixed")
    holders = [_member(client, headers, [], service_user_id=f"s5-{i}", token=five)[0] for i in range(5)]
    mixed_pro = _member(client, headers, [], service_user_id="sm-pro", token=mixed)[0]
    mixed_free = _member(client, headers, [], service_user_id="sm-free", token=mixed)[0]
    solo_user, solo = _member(client, headers, [], service_user_id="s-solo")
    for user in (*holders, mixed_pro, solo_user):
        _tag(runtime, service, user, "plan", "pro")
    _tag(runtime, service, mixed_free, "plan", "free")
    for fetch_size in (1, 1000):
        before = deliveries_per_token(emulator, [five, mixed, solo])
        r = _publish(client, headers, {"filter": PRO})
        assert r.status_code == 202, r.text
        run_worker_until_idle(emu_runtime, [service], fetch_size=fetch_size)
        got = deliveries_per_token(emulator, [five, mixed, solo])
        assert {t: got[t] - before[t] for t in got} == {five: 1, mixed: 1, solo: 1}, (fetch_size, got, before)
        status = _status(client, headers, r.json()["job_id"])
        assert (status["state"], status["targeted"]) == ("done", 3), status


def test_segments_are_snapshotted_when_the_job_is_made(client, runtime, tenant, emulator, emu_runtime):
    service, headers = tenant
    users = {}
    for name, plan in (("s-pro", "pro"), ("s-trial", "trial"), ("s-free", "free")):
        users[name], token = _member(client, headers, [], service_user_id=name)
        users[name + ":token"] = token
        _tag(runtime, service, users[name], "plan", plan)
    _tag(runtime, service, users["s-trial"], "churned", "yes")
    _segment(runtime, service, "paying", [[{"tag": "plan", "op": "in", "value": ["pro", "trial"]}]])
    _segment(runtime, service, "churned", [[{"tag": "churned", "op": "exists"}]])
    body = {"segments": {"include": ["paying"], "exclude": ["churned"]}, "send_at": _soon()}
    r = _publish(client, headers, body)
    assert r.status_code == 202 and r.json()["state"] == "scheduled", r.text
    _segment(runtime, service, "paying", [[{"tag": "plan", "op": "=", "value": "free"}]])  # changed after the job
    again = _publish(client, headers, body, key=None)
    keyed = _publish(client, headers, body, key="seg-1")
    _segment(runtime, service, "churned", [[{"tag": "churned", "op": "not_exists"}]])
    retried = _publish(client, headers, body, key="seg-1")  # the same names asked: the same request
    assert retried.status_code == 202 and retried.json()["job_id"] == keyed.json()["job_id"], retried.text
    _segment(runtime, service, "churned", [[{"tag": "churned", "op": "exists"}]])
    with runtime.sessions.begin() as s:  # only the first job is run below
        s.execute(
            text("UPDATE fanout_job SET state = 'cancelled' WHERE job_id IN (:a, :b)"),
            {"a": again.json()["job_id"], "b": keyed.json()["job_id"]},
        )
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) WHERE job_id = :j"), {"j": r.json()["job_id"]}
        )
    run_worker_until_idle(emu_runtime, [service])
    tokens = [users[n + ":token"] for n in ("s-pro", "s-trial", "s-free")]
    assert deliveries_per_token(emulator, tokens) == dict(zip(tokens, (1, 0, 0), strict=True))
    unknown = _publish(client, headers, {"segments": {"include": ["paying", "nope"]}})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["details"][0]["loc"] == ["body", "segments", "include", "1"]  # loc is strings
    bad = _publish(client, headers, {"filter": [[{"tag": "plan", "op": "elapsed_gt", "value": "x"}]]})
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["loc"][:4] == ["body", "filter", "0", "0"]


def _soon() -> str:
    return (datetime.now(UTC) + timedelta(hours=2)).isoformat()


def test_a_local_time_condition_reaches_each_zone_once(client, runtime, tenant, emulator, emu_runtime):
    service, headers = tenant
    tokens = []
    for zone in ("Europe/Berlin", "America/New_York", None):
        body = {"name": "z"} | ({"timezone": zone} if zone else {})
        user = client.put(f"/v1/users/z-{random_token()[-8:]}", json=body, headers=headers).json()["user_id"]
        token = random_token("z")
        client.post(f"/v1/users/{user}/devices", json={"token": token, "os": "AOS"}, headers=headers)
        for topic in ("a", "b") if zone == "America/New_York" else ("a",):
            client.put(f"/v1/users/{user}/subscriptions/topic/news/{topic}", headers=headers)
        tokens.append(token)
    at = (datetime.now(UTC) - timedelta(days=2)).replace(tzinfo=None)  # every part already released
    with runtime.sessions.begin() as s:
        job = publish_to(
            runtime,
            s,
            Publish(service, "news", {"condition": "'a' in topics || 'b' in topics"}, local_time="09:00", at=at),
        ).job
    assert len(job.target["parts"]) == 3 and job.target["groups"]  # three zones, rows read by zone
    run_worker_until_idle(emu_runtime, [service])
    assert deliveries_per_token(emulator, tokens) == dict.fromkeys(tokens, 1)
    assert _status(client, headers, job.job_id)["state"] == "done"


def test_an_audience_task_resumes_after_its_checkpointed_key(client, runtime, tenant):
    from notee.store import jobs_sql
    from notee.store.task_leases import Claim
    from notee.worker.audience_rows import encode_key
    from notee.worker.reader import PageReader

    service, headers = tenant
    for i in range(4):
        _member(client, headers, [], service_user_id=f"r-{i}")
    job_id = _publish(client, headers, {"users": [f"r-{i}" for i in range(4)]}).json()["job_id"]
    with runtime.sessions() as s:
        job = jobs_sql.get_job(s, job_id)
        keys = s.execute(
            text(
                "SELECT d.user_id, d.device_token FROM device d JOIN job_audience_user j USING (user_id)"
                " WHERE j.job_id = :j AND d.service = :s ORDER BY d.user_id, d.device_token"
            ),
            {"j": job_id, "s": service},
        ).all()
    first_slot = int(keys[1][0][:2], 16)
    claim = Claim(job_id, 0, 0, 255, first_slot, encode_key((keys[1][0], keys[1][1])), 1, "t")

    async def read() -> list[str]:
        reader = PageReader(runtime, 1, claim, job)
        task = asyncio.create_task(reader.run())
        got: list[str] = []
        while True:
            slot, state, _, _, page, _ = await reader.queue.get()
            got += [r[0] for r in page]
            if state is None and slot == 255:
                await task
                return got

    assert asyncio.run(read()) == [k[1] for k in keys[2:]]  # after the checkpointed device, in order


def test_a_topic_grown_past_the_cap_after_the_publish_fails_the_job_once(client, tenant, emulator, emu_runtime):
    service, headers = tenant
    in_a = _member(client, headers, ["a"])[1]
    for _ in range(3):
        _member(client, headers, ["big"])
    r = _publish(client, headers, {"condition": "'a' in topics && !('big' in topics)"})
    assert r.status_code == 202, r.text
    cap = emu_runtime.settings.condition_members_max
    emu_runtime.settings.condition_members_max = 1  # as if 'big' had grown since the publish
    try:
        run_worker_until_idle(emu_runtime, [service])
    finally:
        emu_runtime.settings.condition_members_max = cap
    status = _status(client, headers, r.json()["job_id"])
    assert status["state"] == "failed" and "NOTEE_CONDITION_MEMBERS_MAX" in status["error"], status
    assert deliveries_per_token(emulator, [in_a]) == {in_a: 0}
