"""What scripts rely on in the `notee` CLI (issue 37, "Ready to adopt"): an exit code per kind of
failure, each from a real subprocess against a real `notee api`; ``--json`` on the commands that
print a line of prose; the template and user commands; dead letters through the API (a service's key,
or the admin token with --service); shell completion."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from notee_sdk import Client
from sqlalchemy import text

from notee.cli.remote_client import ExitCode, exit_code_for
from notee.core.logs import token_hint
from notee.store import deadletter
from tests.support.cli import notee, tenant_env
from tests.support.emulator import deliveries_per_token
from tests.support.processes import free_port, subprocess_env, wait_http
from tests.support.registry import make_service, random_token

UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


def test_the_exit_code_table():
    table = {400: 2, 422: 2, 404: 3, 401: 4, 403: 4, 429: 5, 503: 5, 409: 1, 500: 1, 424: 1}
    assert {status: int(exit_code_for(status)) for status in table} == table
    assert [int(code) for code in ExitCode] == [0, 1, 2, 3, 4, 5]


# --- each code, from a real subprocess against the real API -----------------------------------------


def test_invalid_not_found_unauthorized_and_other_failures_exit_with_their_codes(admin_env, service_id):
    env = tenant_env(admin_env, service_id)
    ok = notee("template", "list", env=env)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")

    usage = notee("jobs", "show", env=env)  # typer's own: a missing argument
    assert usage.returncode == ExitCode.INVALID == 2 and "Missing argument" in usage.stderr, usage.stderr
    invalid = notee("template", "put", "BOGUS", "x", "--title", "t", "--body", "b", env=env)  # the API's 422
    assert invalid.returncode == 2 and invalid.stderr.startswith("error: 422 invalid_input"), invalid.stderr

    for args in (("jobs", "show", UNKNOWN_ID), ("user", "show", "ext:nobody"), ("template", "show", "TOPIC", "no")):
        missing = notee(*args, env=env)
        assert missing.returncode == ExitCode.NOT_FOUND == 3, (args, missing.stderr)
        assert missing.stderr.startswith("error: 404 not_found") and missing.stderr.count("\n") == 1

    wrong_key = notee("template", "list", env=env | {"NOTEE_API_KEY": "nk_nokey_" + secrets.token_hex(16)})
    assert wrong_key.returncode == ExitCode.UNAUTHORIZED == 4 and wrong_key.stderr.startswith("error: 401")
    no_token = notee("admin", "service", "list", env=env)  # a service key is no admin token
    assert no_token.returncode == 4 and no_token.stderr.startswith("error: 401"), no_token.stderr

    again = notee("admin", "service", "create", service_id, "--name", "Twice", env=admin_env)  # 409
    assert again.returncode == ExitCode.FAILED == 1 and again.stderr.startswith("error: 409"), again.stderr


def test_an_unreachable_notee_exits_5(admin_env):
    nowhere = f"http://127.0.0.1:{free_port()}"
    down = notee("admin", "service", "list", env=admin_env | {"NOTEE_URL": nowhere})
    assert down.returncode == ExitCode.UNAVAILABLE == 5
    assert down.stderr.startswith(f"error: cannot reach Notee at {nowhere}: ") and down.stderr.count("\n") == 1


def test_an_api_whose_database_is_down_answers_503_and_the_cli_exits_5(processes, admin_env):
    """A real `notee api` whose MySQL is not there: every request answers 503 store_unavailable; the
    SDK retries (Retry-After 1), then the CLI exits 5."""
    port = free_port()
    nowhere = f"mysql+pymysql://notee:notee@127.0.0.1:{free_port()}/notee_nowhere"
    api = processes.start("api-no-mysql", ["api", "--port", str(port)], subprocess_env(NOTEE_MYSQL_URL=nowhere))
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/livez", proc=api)  # liveness reads no store
    out = notee("admin", "service", "list", env=admin_env | {"NOTEE_URL": url})
    assert out.returncode == 5, out.stderr
    assert out.stderr.startswith("error: 503 store_unavailable") and out.stderr.count("\n") == 1, out.stderr


@contextmanager
def _bucket_kept_empty(runtime, service: str, rate_class: str) -> Iterator[None]:
    """Keep ``service``'s bucket of ``rate_class`` spent (half a second of debt at 1 per second, so
    each refusal says Retry-After 1) until the block ends: every retry of the SDK is refused too."""
    stop = threading.Event()
    spend = text(
        "INSERT INTO rate_bucket (service, class, tat) VALUES (:s, :c, UNIX_TIMESTAMP(SYSDATE(6)) + 0.5) "
        "ON DUPLICATE KEY UPDATE tat = UNIX_TIMESTAMP(SYSDATE(6)) + 0.5"
    )

    def keep() -> None:
        while not stop.is_set():
            with runtime.sessions.begin() as session:
                session.execute(spend, {"s": service, "c": rate_class})
            stop.wait(0.05)

    thread = threading.Thread(target=keep, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def test_a_rate_limit_still_refusing_after_the_retries_exits_5(admin_env, service_id, runtime):
    env = tenant_env(admin_env, service_id)
    with Client(admin_env["NOTEE_URL"], admin_token=admin_env["NOTEE_ADMIN_TOKEN"]) as admin:
        admin.put_rate_limit(service_id, "read", rate=1, burst=1)
    with _bucket_kept_empty(runtime, service_id, "read"):
        out = notee("template", "list", env=env)
    assert out.returncode == 5, out.stderr
    assert out.stderr.startswith("error: 429 rate_limited") and out.stderr.count("\n") == 1, out.stderr


# --- --json --------------------------------------------------------------------------------------------


def _json(out) -> dict:
    assert out.returncode == 0, out.stdout + out.stderr
    [line] = out.stdout.splitlines()  # one object, on one line
    return json.loads(line)


def test_json_prints_the_apis_answer_instead_of_a_line(admin_env, service_id):
    made = _json(notee("admin", "service", "create", service_id, "--name", "Json", "--json", env=admin_env))
    assert (made["service"], made["timezone"]) == (service_id, "UTC")
    key = _json(notee("admin", "key", "create", service_id, "--json", env=admin_env))
    assert key["api_key"].startswith(f"nk_{key['key_id']}_")
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key["api_key"]}

    template = _json(notee("template", "put", "TOPIC", "news", "--title", "t", "--body", "b", "--json", env=env))
    assert (template["method"], template["type"], template["version"]) == ("TOPIC", "news", 1)
    user = _json(notee("user", "put", "json-1", "--name", "Ana", "--json", env=env))
    assert (user["service_user_id"], user["name"]) == ("json-1", "Ana")
    device = _json(notee("user", "device", user["user_id"], random_token("js"), "--os", "aos", "--json", env=env))
    assert device["os"] == "AOS"
    subscribed = _json(notee("subscribe", "ext:json-1", "news", "sports", "--json", env=env))
    assert subscribed == {"status": "subscribed", "devices": 1, "schedule": None}
    bulk = notee("subscribe-bulk", "news", "sports", user["user_id"], UNKNOWN_ID, "--json", env=env)
    results = [
        {"user_id": user["user_id"], "status": "already_subscribed"},
        {"user_id": UNKNOWN_ID, "status": "not_found"},
    ]
    assert bulk.returncode == 1 and json.loads(bulk.stdout) == {
        "results": results,
        "subscribed": 0,
        "already_subscribed": 1,
        "not_found": 1,
    }
    quiet = _json(notee("quiet-hours", "22:00-07:00", "--json", env=env))
    assert quiet == {"quiet_hours": {"start": "22:00", "end": "07:00"}}

    when = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    accepted = _json(notee("publish", "news", "sports", "--send-at", when, "--json", env=env))
    assert accepted["state"] == "scheduled" and accepted["send_at"]
    cancelled = _json(notee("jobs", "cancel", accepted["job_id"], "--json", env=env))
    assert (cancelled["job_id"], cancelled["state"]) == (accepted["job_id"], "cancelled")
    deleted = _json(notee("template", "delete", "topic", "news", "--json", env=env))
    assert deleted == {"method": "TOPIC", "type": "news", "deleted": True}
    revoked = _json(notee("admin", "key", "revoke", service_id, key["key_id"], "--json", env=admin_env))
    assert revoked == {"service": service_id, "key_id": key["key_id"], "revoked": True}


# --- templates and users ------------------------------------------------------------------------------


def test_a_template_is_shown_and_deleted(admin_env, service_id):
    env = tenant_env(admin_env, service_id)
    notee("template", "put", "SINGLE", "otp", "--title", "Code", "--body", "{{code}}", "--data", "k=v", env=env)
    shown = _json(notee("template", "show", "single", "otp", env=env))
    assert (shown["method"], shown["type"], shown["title"], shown["data"]) == ("SINGLE", "otp", "Code", {"k": "v"})
    gone = notee("template", "delete", "SINGLE", "otp", env=env)
    assert gone.returncode == 0 and gone.stdout == "template SINGLE/otp deleted\n", gone.stdout + gone.stderr
    assert notee("template", "show", "SINGLE", "otp", env=env).returncode == 3
    assert notee("template", "delete", "SINGLE", "otp", env=env).returncode == 3


def test_users_are_shown_by_either_id_and_listed_with_filters(admin_env, service_id):
    env = tenant_env(admin_env, service_id)
    ids = {}
    for name in ("none", "android", "iphone"):  # created in this order: listed newest first
        ids[name] = notee("user", "put", f"cli-{name}", "--name", name, env=env).stdout.strip()
    notee("user", "device", ids["android"], random_token("and"), "--os", "AOS", env=env)
    notee("user", "device", "ext:cli-iphone", random_token("ios"), "--os", "IOS", env=env)  # by the service's id

    by_uuid = _json(notee("user", "show", ids["iphone"], env=env))
    by_ext = _json(notee("user", "show", "ext:cli-iphone", env=env))
    assert by_uuid == by_ext and (by_ext["user_id"], by_ext["name"]) == (ids["iphone"], "iphone")

    def listed(*args: str) -> list[str]:
        out = notee("user", "list", *args, env=env)
        assert out.returncode == 0, out.stderr
        return [json.loads(line)["service_user_id"] for line in out.stdout.splitlines()]

    assert listed() == ["cli-iphone", "cli-android", "cli-none"]
    assert listed("--has-devices") == ["cli-iphone", "cli-android"]
    assert listed("--no-devices") == ["cli-none"]
    assert listed("--platform", "ios") == ["cli-iphone"]
    assert listed("--limit", "2") == ["cli-iphone", "cli-android"]
    assert listed("--created-since", (datetime.now(UTC) + timedelta(hours=1)).isoformat()) == []
    bad = notee("user", "list", "--created-since", "yesterday", env=env)
    assert bad.returncode == 2 and "--created-since 'yesterday' is not an RFC 3339 time" in bad.stderr


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
    assert notee("dead-letters", "list", "--service", "NOSUCHSVC", env=admin_env).returncode == 3
    no_key = notee("dead-letters", "list", env=admin_env)  # neither a key nor --service
    assert no_key.returncode == 2 and "NOTEE_API_KEY" in no_key.stderr, no_key.stderr

    other = notee("dead-letters", "replay", "--service", service_id, "--id", "999999999", env=admin_env)
    assert json.loads(other.stdout) == {"replayed": 0, "delivered": 0, "pruned": 0, "failed": 0}
    replayed = notee("dead-letters", "replay", "--id", str(row["id"]), env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == {"replayed": 1, "delivered": 1, "pruned": 0, "failed": 0}
    assert deliveries_per_token(emulator, [token], api="fcm") == {token: 1}
    assert notee("dead-letters", "list", env=env).stdout == ""


# --- shell completion ---------------------------------------------------------------------------------


def test_shell_completion_scripts_and_answers():
    # Typer's switch for naming the shell instead of detecting it (no interactive shell here).
    env = subprocess_env(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    bash = notee("--show-completion", "bash", env=env)
    assert bash.returncode == 0 and "complete -o default -F _notee_completion notee" in bash.stdout, bash.stderr
    zsh = notee("--show-completion", "zsh", env=env)
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef notee"), zsh.stdout
    # What bash's completion function asks `notee` (the script above), answered without a shell.
    asked = env | {"_NOTEE_COMPLETE": "complete_bash", "COMP_WORDS": "notee template ", "COMP_CWORD": "2"}
    answer = notee(env=asked)
    assert answer.stdout.split() == ["put", "show", "delete", "list"], answer.stdout + answer.stderr
    groups = notee(env=asked | {"COMP_WORDS": "notee dead", "COMP_CWORD": "1"})
    assert groups.stdout.split() == ["dead-letters"]
