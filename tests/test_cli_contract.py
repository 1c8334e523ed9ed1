"""What scripts rely on in the `notee` CLI (issue 37, "Ready to adopt"), from real subprocesses
against a real `notee api`: dead letters through the API (a service's key, or the admin token with
--service)."""

from __future__ import annotations

import json
from datetime import datetime

from notee.core.logs import token_hint
from notee.store import deadletter
from tests.support.cli import notee
from tests.support.emulator import deliveries_per_token
from tests.support.registry import make_service, random_token

# --- dead letters through the API ---------------------------------------------------------------------


def test_dead_letters_are_listed_and_replayed_through_the_api(admin_env, service_id, runtime, emulator):
    make_service(runtime, service_id, fcm=True)
    key = notee("admin", "key", "create", service_id, env=admin_env).stdout.strip()
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key}
    notee("template", "put", "SINGLE", "hi", "--title", "Hi", "--body", "there", env=env)
    token = random_token("dl")
    letter = deadletter.DeadLetter(
        service_id,
        None,
        token,
        "AOS",
        "fcm",
        "gave up after 5 attempts",
        5,
        {"title": "Hi", "body": "there", "data": {}},
    )
    with runtime.sessions.begin() as s:  # as a fan-out job records it
        deadletter.record(s, [letter], now=datetime(2026, 1, 1))

    expected = {
        "job_id": None,
        "device": token_hint(token),
        "provider": "fcm",
        "reason": "gave up after 5 attempts",
        "attempts": 5,
        "created_at": "2026-01-01T00:00:00",
    }
    listed = notee("dead-letters", "list", env=env)  # the key's service
    assert listed.returncode == 0 and listed.stderr == "1 dead letter(s)\n", listed.stderr
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {k: v for k, v in row.items() if k != "id"} == expected and token not in listed.stdout
    by_admin = notee("dead-letters", "list", "--service", service_id, env=admin_env)  # any service's, by name
    assert [json.loads(line) for line in by_admin.stdout.splitlines()] == [row]
    no_key = notee("dead-letters", "list", env=admin_env)  # neither a key nor --service
    assert no_key.returncode == 2 and "NOTEE_API_KEY" in no_key.stderr, no_key.stderr

    other = notee("dead-letters", "replay", "--service", service_id, "--id", "999999999", env=admin_env)
    assert json.loads(other.stdout) == {"replayed": 0, "delivered": 0, "pruned": 0, "failed": 0}
    replayed = notee("dead-letters", "replay", "--id", str(row["id"]), env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == {"replayed": 1, "delivered": 1, "pruned": 0, "failed": 0}
    assert deliveries_per_token(emulator, [token], api="fcm") == {token: 1}
    assert notee("dead-letters", "list", env=env).stdout == ""
