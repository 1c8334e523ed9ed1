"""`notee publish` to every target, as a user runs it (a subprocess against a real `notee api`), and
the SDK's ``publish``: a condition, a user list (from a file), platforms, and the original
`notee publish TYPE TOPIC` form; what the devices received, through a real worker and the emulator."""

from __future__ import annotations

import json
import os

import pytest
from notee_sdk import Client
from sqlalchemy import text

from tests.support.cli import notee
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import random_token

pytestmark = pytest.mark.tenant(credentials=True)
PRO = [[{"tag": "plan", "op": "=", "value": "pro"}]]


@pytest.fixture()
def env(api_process, tenant) -> dict[str, str]:
    tenant.template("TOPIC", "news", title="Hello {{name}}", body="Body", defaults={"name": "you"})
    base = {k: v for k, v in os.environ.items() if k not in ("NOTEE_API_KEY", "NOTEE_ADMIN_TOKEN")}
    return base | {"NOTEE_URL": api_process.url, "NOTEE_API_KEY": tenant.api_key}


def _member(tenant, topics, os_="AOS", service_user_id=None):
    token = random_token(os_.lower())
    user = tenant.user(service_user_id, devices=[(token, os_)])
    for topic in topics:
        r = tenant.client.put(f"/v1/users/{user}/subscriptions/topic/news/{topic}", headers=tenant.headers)
        assert r.status_code in (200, 201), r.text
    return token


def test_the_cli_publishes_to_a_condition_a_user_list_and_a_topic(env, tenant, emulator, emu_runtime, tmp_path):
    a_only, both = _member(tenant, ["a"]), _member(tenant, ["a", "b"])
    listed_ios = _member(tenant, [], "IOS", service_user_id="cli-1")
    listed_aos = _member(tenant, [], "AOS", service_user_id="cli-2")
    cond = notee("publish", "news", "--condition", "'a' in topics && !('b' in topics)", env=env)
    assert cond.returncode == 0, cond.stderr
    ids = tmp_path / "users.txt"
    ids.write_text("cli-1\ncli-2\nnobody\n")
    listed = notee("publish", "news", "--users", str(ids), "--platform", "IOS", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    answer = json.loads(listed.stdout)
    assert answer["unknown_users"] == 1 and answer["state"] == "queued"
    old_form = notee("publish", "news", "b", env=env)  # the original form still works
    assert old_form.returncode == 0 and old_form.stdout.strip(), old_form.stderr
    inline = notee("publish", "news", "--users", "cli-2", env=env)
    assert inline.returncode == 0, inline.stderr
    bad = notee("publish", "news", "--condition", "'a' in topics", "--topic", "a", env=env)
    assert bad.returncode != 0 and "exactly one" in bad.stderr, bad.stderr
    run_worker_until_idle(emu_runtime, [tenant.service])
    got = deliveries_per_token(emulator, [a_only, both, listed_ios, listed_aos])
    assert got == {a_only: 1, both: 1, listed_ios: 1, listed_aos: 1}  # both: from the topic 'b' publish


def test_the_cli_publishes_to_a_filter_and_a_segment(env, runtime, tenant, emulator, emu_runtime):
    pro_user = tenant.user("cli-pro", devices=[(pro := random_token("pro"), "AOS")])
    tenant.user("cli-free", devices=[(free := random_token("free"), "AOS")])
    with runtime.sessions.begin() as s:
        s.execute(
            text(
                "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, updated_at)"
                " VALUES (:s, :u, 'plan', 's', 'pro', UTC_TIMESTAMP(6))"
            ),
            {"s": tenant.service, "u": pro_user},
        )
        s.execute(
            text(
                "INSERT INTO segment (service, name, filter, created_at, updated_at)"
                " VALUES (:s, 'pros', :f, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
            ),
            {"s": tenant.service, "f": json.dumps(PRO)},
        )
    by_filter = notee("publish", "news", "--filter", json.dumps(PRO), env=env)
    assert by_filter.returncode == 0, by_filter.stderr
    by_segment = notee("publish", "news", "--segment", "pros", "--exclude-segment", "pros", env=env)
    assert by_segment.returncode == 0, by_segment.stderr  # in pros and not in pros: nobody
    unknown = notee("publish", "news", "--segment", "nope", env=env)
    assert unknown.returncode == 2 and "nope" in unknown.stderr, unknown.stderr
    run_worker_until_idle(emu_runtime, [tenant.service])
    assert deliveries_per_token(emulator, [pro, free]) == {pro: 1, free: 0}


def test_the_sdk_publishes_to_a_condition_and_a_user_list(api_process, tenant, emulator, emu_runtime):
    tenant.template("TOPIC", "news", title="Hello", body="Body")
    in_a = _member(tenant, ["a"])
    user_token = _member(tenant, [], service_user_id="sdk-1")
    with Client(api_process.url, api_key=tenant.api_key) as sdk:
        first = sdk.publish("news", condition="'a' in topics", idempotency_key="sdk-cond")
        assert sdk.publish("news", condition="'a' in topics", idempotency_key="sdk-cond").job_id == first.job_id
        listed = sdk.publish("news", users=["sdk-1", "ghost"], platforms=["AOS"])
        assert listed.unknown_users == 1
        run_worker_until_idle(emu_runtime, [tenant.service])
        assert sdk.get_job(listed.job_id).state == "done"
    assert deliveries_per_token(emulator, [in_a, user_token]) == {in_a: 1, user_token: 1}
