"""`notee user tags|tag|untag` and `notee user device --app-version` as a user runs them: subprocesses
against a real `notee api` (tests/support/cli.py), with and without --json; typed values by prefix;
bad input exits 2 and writes nothing; an unknown user exits 3."""

from __future__ import annotations

import json

from tests.support.cli import notee, tenant_env
from tests.support.registry import random_token


def _ok(out) -> str:
    assert out.returncode == 0, out.stdout + out.stderr
    return str(out.stdout)


def test_tags_are_set_shown_and_removed(admin_env, service_id):
    env = tenant_env(admin_env, service_id)
    user_id = _ok(notee("user", "put", "tag-1", env=env)).strip()
    line = _ok(
        notee(
            "user", "tag", "ext:tag-1", "plan=pro", "age=n:31", "score=n:4.5", "beta=b:true",
            "renews=t:2026-12-31T00:00:00Z", "label=s:n:1", "note=a=b", env=env,
        )
    )  # fmt: skip
    assert line == "7 tag(s) set; the user holds 7\n"
    shown = json.loads(_ok(notee("user", "tags", user_id, env=env)))
    assert shown == {
        "user_id": user_id,
        "tags": {
            "age": 31,
            "beta": True,
            "label": "n:1",
            "note": "a=b",
            "plan": "pro",
            "renews": {"timestamp": "2026-12-31T00:00:00Z"},
            "score": 4.5,
        },
    }
    answer = json.loads(_ok(notee("user", "untag", user_id, "age", "score", "absent", "--json", env=env)))
    assert set(answer["tags"]) == {"beta", "label", "note", "plan", "renews"}
    changed = json.loads(_ok(notee("user", "tag", user_id, "plan=free", "--json", env=env)))
    assert changed["tags"]["plan"] == "free" and len(changed["tags"]) == 5
    assert _ok(notee("user", "untag", "ext:tag-1", "plan", env=env)) == "1 tag(s) removed; the user holds 4\n"


def test_bad_tags_exit_2_and_write_nothing_and_an_unknown_user_exits_3(admin_env, service_id):
    env = tenant_env(admin_env, service_id)
    user_id = _ok(notee("user", "put", "tag-2", env=env)).strip()
    for args in (
        ["novalue"],
        ["n=n:many"],
        ["n=n:nan"],
        ["b=b:yes"],
        ["t=t:2026-12-31"],
        ["bad key=1"],
        ["s=" + "x" * 256],
    ):
        out = notee("user", "tag", user_id, *args, env=env)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stderr.startswith("error: ") and len(out.stderr.splitlines()) == 1
    assert json.loads(_ok(notee("user", "tags", user_id, env=env)))["tags"] == {}
    assert notee("user", "tags", "ext:nobody", env=env).returncode == 3
    assert notee("user", "tag", "ext:nobody", "a=1", env=env).returncode == 3


def test_a_device_registers_its_app_version(admin_env, service_id):
    env = tenant_env(admin_env, service_id)
    user_id = _ok(notee("user", "put", "app-1", env=env)).strip()
    token = random_token("cli")
    device = json.loads(
        _ok(notee("user", "device", user_id, token, "--os", "AOS", "--app-version", "5.2.1-beta", "--json", env=env))
    )
    assert device["app_version"] == "5.2.1-beta"
    again = json.loads(_ok(notee("user", "device", user_id, token, "--os", "AOS", "--json", env=env)))
    assert again["app_version"] == "5.2.1-beta"  # left out: kept
    bad = notee("user", "device", user_id, token, "--os", "AOS", "--app-version", "5 2", env=env)
    assert bad.returncode == 2, bad.stderr
