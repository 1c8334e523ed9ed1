"""Segments and estimates from the SDK (sync and async, the iterator over pages) and the `notee
segment` / `notee estimate` commands run as subprocesses, against a real `notee api` (issue 30)."""

from __future__ import annotations

import asyncio
import json
import secrets

import notee_sdk
import pytest
from notee_sdk import AsyncClient, Client
from sqlalchemy import text

from tests.support.cli import notee, tenant_env
from tests.support.tenants import new_service_id

PRO = [[{"tag": "plan", "op": "=", "value": "pro"}]]


@pytest.fixture()
def env(admin_env, service_id, runtime) -> dict[str, str]:
    """A service (made through the CLI) with three users, each with one AOS device; two tagged plan=pro."""
    found = tenant_env(admin_env, service_id)
    with Client(found["NOTEE_URL"], api_key=found["NOTEE_API_KEY"]) as c:
        for n, plan in enumerate(("pro", "pro", "free")):
            user = c.put_user(f"u{n}")
            c.add_device(user.user_id, f"tok-{secrets.token_hex(8)}", "AOS")
            with runtime.sessions.begin() as s:
                s.execute(
                    text(
                        "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, updated_at)"
                        " VALUES (:s, :u, 'plan', 's', :v, UTC_TIMESTAMP(6))"
                    ),
                    {"s": service_id, "u": user.user_id, "v": plan},
                )
    return found


def test_the_sdk_manages_segments_and_estimates(env, admin_env):
    with Client(env["NOTEE_URL"], api_key=env["NOTEE_API_KEY"]) as c:
        made = c.create_segment("pros", PRO, description="paying")
        assert made.reach is None and made.description == "paying"
        assert c.get_segment("pros").reach.users == 2  # type: ignore[union-attr]
        for i in range(3):
            c.put_segment(f"z{i}", PRO)
        names = [s.name for s in c.iter_segments(page_size=2)]
        assert names == ["pros", "z0", "z1", "z2"]
        assert {s.reach.users for s in c.iter_segments(counts=True, page_size=3)} == {2}  # type: ignore[union-attr]
        assert c.estimate_audience(include=["pros"], platforms=["AOS"]).devices == 2
        assert c.estimate_audience(users=["u0", "u2", "ghost"]).unknown_users == 1
        with pytest.raises(notee_sdk.Conflict):
            c.create_segment("pros", PRO)
        with pytest.raises(notee_sdk.ValidationFailed) as bad:
            c.estimate_audience(include=["nope"])
        assert bad.value.details[0]["loc"] == ["body", "segments", "include", "0"]
        c.delete_segment("z2")
        with pytest.raises(notee_sdk.NotFound):
            c.get_segment("z2")

    async def asynchronously() -> list[str]:
        async with AsyncClient(env["NOTEE_URL"], api_key=env["NOTEE_API_KEY"]) as a:
            assert (await a.estimate_audience(filter=PRO)).users == 2
            return [s.name async for s in a.iter_segments(page_size=1)]

    assert asyncio.run(asynchronously()) == ["pros", "z0", "z1"]

    other = tenant_env(admin_env, new_service_id())  # another service sees none of it
    with Client(other["NOTEE_URL"], api_key=other["NOTEE_API_KEY"]) as stranger:
        assert list(stranger.iter_segments()) == []
        with pytest.raises(notee_sdk.NotFound):
            stranger.get_segment("pros")


def test_the_cli_manages_segments_and_estimates(env, admin_env):
    made = notee("segment", "create", "pros", "--filter", json.dumps(PRO), "--description", "paying", env=env)
    assert made.returncode == 0 and made.stdout.strip() == "segment pros created", made.stdout + made.stderr
    again = notee("segment", "create", "pros", "--filter", json.dumps(PRO), env=env)
    assert again.returncode == 1 and "409" in again.stderr
    bad = notee("segment", "create", "x", "--filter", "[[{", env=env)
    assert bad.returncode == 2 and "--filter" in bad.stderr
    wrong = notee("segment", "create", "x", "--filter", '[[{"tag": "plan", "op": "<", "value": true}]]', env=env)
    assert wrong.returncode == 2 and "filter.0.0.op" in wrong.stderr, wrong.stderr

    shown = notee("segment", "show", "pros", env=env)
    assert shown.returncode == 0 and json.loads(shown.stdout)["reach"]["users"] == 2
    listed = notee("segment", "list", "--counts", env=env)
    assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == ["pros"]

    line = notee("estimate", "--segment", "pros", "--platform", "AOS", env=env)
    assert line.returncode == 0 and line.stdout.strip() == "users 2 · devices 2 (AOS 2) · exact", line.stdout
    as_json = notee("estimate", "--filter", json.dumps(PRO), "--json", env=env)
    assert json.loads(as_json.stdout) | {"topics": None} == {
        "users": 2,
        "devices": 2,
        "devices_by_platform": {"AOS": 2},
        "exact": True,
        "method": "mysql_count",
        "unknown_users": None,
        "topics": None,
    }
    unknown = notee("estimate", "--segment", "nope", env=env)
    assert unknown.returncode == 2 and "segments.include.0" in unknown.stderr, unknown.stderr

    other = tenant_env(admin_env, new_service_id())
    assert notee("segment", "show", "pros", env=other).returncode == 3
    assert notee("segment", "delete", "pros", env=other).returncode == 3
    gone = notee("segment", "delete", "pros", env=env)
    assert gone.returncode == 0 and gone.stdout.strip() == "segment pros deleted"
    assert notee("segment", "show", "pros", env=env).returncode == 3
