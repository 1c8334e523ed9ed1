"""The `notee` CLI as a user runs it: subprocesses against a real `notee api`, a real worker and the
emulator, configured only by NOTEE_URL and NOTEE_ADMIN_TOKEN / NOTEE_API_KEY. Errors are one line on
stderr with the exit code of their kind (notee.cli.remote_client.ExitCode), also for `notee migrate`
with a store down; tests/integration/test_cli_contract.py has each code, --json, completion and the newer commands."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.cli import notee
from tests.support.emulator import deliveries_per_token
from tests.support.processes import free_port
from tests.support.registry import fcm_service_account, random_token


def test_a_service_created_without_a_time_zone_is_in_utc(admin_env, service_id):
    """The CLI's default zone is UTC, said in its --help (the API's own default is the seed's)."""
    made = notee("admin", "service", "create", service_id, "--name", "No zone", env=admin_env)
    assert made.returncode == 0 and made.stdout.strip() == f"service {service_id} created (UTC)", (
        made.stdout + made.stderr
    )


@pytest.fixture()
def admin_env(api_process, settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NOTEE_API_KEY",)}
    return env | {"NOTEE_URL": api_process.url, "NOTEE_ADMIN_TOKEN": settings.admin_token.get_secret_value()}


def test_from_a_new_service_to_a_push_with_the_cli_alone(processes, admin_env, service_id, emulator, tmp_path: Path):
    ok = notee(
        "admin", "service", "create", service_id, "--name", "CLI shop", "--timezone", "Europe/Paris", env=admin_env
    )
    assert ok.returncode == 0, ok.stderr
    listed = [json.loads(line) for line in notee("admin", "service", "list", env=admin_env).stdout.splitlines()]
    assert service_id in [s["service"] for s in listed]
    key = notee("admin", "key", "create", service_id, "--label", "cli", env=admin_env)
    assert key.returncode == 0 and key.stdout.strip().startswith("nk_"), key.stderr
    account = tmp_path / "sa.json"
    account.write_text(json.dumps(fcm_service_account()))
    assert notee("admin", "credentials", "fcm", service_id, "--file", str(account), env=admin_env).returncode == 0

    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key.stdout.strip()}
    user_id = notee("user", "put", "cli-user-1", "--name", "Ana", env=env).stdout.strip()
    token = random_token("cli")
    assert notee("user", "device", user_id, token, "--os", "AOS", env=env).returncode == 0
    saved = notee("template", "put", "TOPIC", "news", "--title", "Hi {{team}}", "--body", "Kick-off", env=env)
    assert saved.returncode == 0 and "TOPIC/news saved" in saved.stdout, saved.stderr
    sub = notee("subscribe", user_id, "news", "sports", env=env)
    assert sub.returncode == 0 and sub.stdout.startswith("subscribed: 1 device"), sub.stdout + sub.stderr

    worker = processes.worker(service_id)
    try:
        published = notee("publish", "news", "sports", "--var", "team=Reds", "--wait", "--timeout", "90", env=env)
    finally:
        worker.stop(timeout=30)
    assert published.returncode == 0, published.stderr
    job_id = published.stdout.strip()
    assert published.stderr.strip().splitlines()[-1].startswith("done: sent 1/1 · failed 0 · pruned 0")
    assert deliveries_per_token(emulator, [token], api="fcm") == {token: 1}

    shown = json.loads(notee("jobs", "show", job_id, env=env).stdout)
    assert (shown["state"], shown["sent"], shown["targeted"]) == ("done", 1, 1)
    jobs = [json.loads(line) for line in notee("jobs", "list", "--state", "done", env=env).stdout.splitlines()]
    assert [j["job_id"] for j in jobs] == [job_id]


def test_a_recurring_subscription_from_the_cli(admin_env, service_id):
    notee("admin", "service", "create", service_id, "--name", "Cycle", env=admin_env)
    key = notee("admin", "key", "create", service_id, env=admin_env).stdout.strip()
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key}
    user_id = notee("user", "put", "cy-1", env=env).stdout.strip()
    notee("user", "device", user_id, random_token("cy"), "--os", "IOS", env=env)
    notee("template", "put", "CYCLE", "daily", "--title", "Morning", "--body", "Summary", env=env)
    sub = notee(
        "subscribe", user_id, "daily", "--days", "mon,fri", "--at", "09:30", "--timezone", "Asia/Tokyo", env=env
    )
    assert sub.returncode == 0 and "MON,FRI 09:30 Asia/Tokyo" in sub.stdout, sub.stdout + sub.stderr


def test_many_users_subscribed_from_the_cli(admin_env, service_id):
    notee("admin", "service", "create", service_id, "--name", "Bulk", env=admin_env)
    key = notee("admin", "key", "create", service_id, env=admin_env).stdout.strip()
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key}
    users = [notee("user", "put", f"bulk-{i}", env=env).stdout.strip() for i in range(3)]
    notee("user", "device", users[0], random_token("bulk"), "--os", "AOS", env=env)
    notee("template", "put", "TOPIC", "news", "--title", "t", "--body", "b", env=env)
    unknown = "00000000-0000-4000-8000-000000000000"
    stdin = f"{users[2]}\n{unknown}\n"
    out = subprocess.run(
        [sys.executable, "-m", "notee", "subscribe-bulk", "news", "sports", users[0], users[1], "--file", "-"],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = out.stdout.splitlines()
    assert out.returncode == 1, out.stdout + out.stderr  # an unknown user is reported, and fails the command
    assert json.loads(lines[0]) == {"user_id": unknown, "status": "not_found"}
    assert lines[-1] == "subscribed 3 · already_subscribed 0 · not_found 1"
    again = notee("subscribe-bulk", "news", "sports", *users, env=env)
    assert again.returncode == 0 and again.stdout.strip() == "subscribed 0 · already_subscribed 3 · not_found 0"


@pytest.mark.parametrize(
    "args, expected, code",
    [
        (("template", "put", "BOGUS", "x", "--title", "t", "--body", "b"), "error: 422", 2),
        (("jobs", "show", "00000000-0000-4000-8000-000000000000"), "error: 404", 3),
        (("subscribe", "00000000-0000-4000-8000-000000000000", "news"), "give a TOPIC, or --days and --at", 2),
    ],
)
def test_errors_are_one_line_and_a_non_zero_exit(admin_env, service_id, args, expected, code):
    notee("admin", "service", "create", service_id, "--name", "Errors", env=admin_env)
    key = notee("admin", "key", "create", service_id, env=admin_env).stdout.strip()
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key}
    out = notee(*args, env=env)
    assert out.returncode == code, out.stderr
    assert expected in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_wrong_credentials_and_an_unreachable_server_are_one_line(admin_env):
    wrong = notee("template", "list", env=admin_env | {"NOTEE_API_KEY": "nk_nokey_" + secrets.token_hex(16)})
    assert wrong.returncode == 4 and wrong.stderr.startswith("error: 401") and wrong.stderr.count("\n") == 1
    nowhere = f"http://127.0.0.1:{free_port()}"
    down = notee("template", "list", env=admin_env | {"NOTEE_URL": nowhere, "NOTEE_API_KEY": "nk_x_y"})
    assert (
        down.returncode == 5
        and down.stderr == f"error: cannot reach Notee at {nowhere}: {down.stderr.split(': ', 2)[2]}"
        and down.stderr.count("\n") == 1
    )
    unset = notee("jobs", "list", env={k: v for k, v in admin_env.items() if k != "NOTEE_URL"})
    assert unset.returncode == 1 and "NOTEE_URL" in unset.stderr and unset.stderr.count("\n") == 1


@pytest.mark.parametrize("store", ["mysql", "cassandra"])
def test_migrate_with_a_store_down_names_it_in_one_line(store, settings):
    port = free_port()  # nothing listens there
    env = dict(os.environ)
    if store == "mysql":
        env["NOTEE_MYSQL_URL"] = f"mysql+pymysql://notee:notee@127.0.0.1:{port}/notee_nowhere"
        expected = f"error: MySQL at 127.0.0.1:{port} (database notee_nowhere) is not reachable: "
    else:
        env["NOTEE_CASSANDRA_PORT"] = str(port)
        expected = f"error: Cassandra at 127.0.0.1 port {port} is not reachable: "
    out = notee("migrate", env=env)
    assert out.returncode == 5  # unavailable
    assert out.stderr.startswith(expected) and out.stderr.count("\n") == 1, out.stderr


def test_a_queued_job_is_cancelled_from_the_cli(admin_env, service_id):
    notee("admin", "service", "create", service_id, "--name", "Cancel", env=admin_env)
    key = notee("admin", "key", "create", service_id, env=admin_env).stdout.strip()
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key}
    notee("template", "put", "TOPIC", "news", "--title", "t", "--body", "b", env=env)
    job_id = notee("publish", "news", "nobody", env=env).stdout.strip()  # no worker runs for this service
    out = notee("jobs", "cancel", job_id, env=env)
    assert out.returncode == 0 and out.stdout.startswith(f"job {job_id} cancelled"), out.stdout + out.stderr
    assert json.loads(notee("jobs", "show", job_id, env=env).stdout)["state"] == "cancelled"


def test_a_scheduled_publish_and_send_from_the_cli_wait_and_can_be_cancelled(admin_env, service_id):
    notee("admin", "service", "create", service_id, "--name", "Later", env=admin_env)
    key = notee("admin", "key", "create", service_id, env=admin_env).stdout.strip()
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key}
    notee("template", "put", "TOPIC", "news", "--title", "t", "--body", "b", env=env)
    notee("template", "put", "SINGLE", "otp", "--title", "t", "--body", "b", env=env)
    user_id = notee("user", "put", "later-1", env=env).stdout.strip()
    at = "2099-01-01T09:00:00+09:00"
    bad = notee("publish", "news", "sports", "--send-at", "2099-01-01T09:00:00", env=env)  # no offset
    assert bad.returncode == 2 and "RFC 3339" in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr
    far = notee("publish", "news", "sports", "--send-at", at, env=env)  # beyond schedule_max_days: the API's 422
    assert far.returncode == 2 and far.stderr.startswith("error: 422") and "send_at" in far.stderr, far.stderr
    soon = "2000-01-01T00:00:00Z"
    past = notee("send", user_id, "otp", "--send-at", soon, env=env)
    assert past.returncode == 2 and "in the past" in past.stderr, past.stderr
    when = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    topic_job = notee("publish", "news", "sports", "--send-at", when, env=env).stdout.strip()
    send_job = notee("send", user_id, "otp", "--send-at", when, env=env).stdout.strip()
    listed = [json.loads(line) for line in notee("jobs", "list", "--state", "scheduled", env=env).stdout.splitlines()]
    assert sorted(j["job_id"] for j in listed) == sorted([topic_job, send_job])
    for job_id in (topic_job, send_job):
        out = notee("jobs", "cancel", job_id, env=env)
        assert out.returncode == 0 and out.stdout.startswith(f"job {job_id} cancelled"), out.stdout + out.stderr


def test_subscriber_counts_calendar_and_summary_from_the_cli(admin_env, service_id, runtime):
    notee("admin", "service", "create", service_id, "--name", "Insight", env=admin_env)
    key = notee("admin", "key", "create", service_id, env=admin_env).stdout.strip()
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key}
    notee("template", "put", "TOPIC", "news", "--title", "t", "--body", "b", env=env)
    notee("template", "put", "CYCLE", "daily", "--title", "Morning", "--body", "Summary", env=env)
    users = [notee("user", "put", f"in-{i}", env=env).stdout.strip() for i in range(2)]
    for u in users:
        assert notee("subscribe", u, "news", "sports", env=env).returncode == 0
    notee("user", "device", users[0], random_token("in"), "--os", "AOS", env=env)
    notee("subscribe", users[0], "daily", "--days", "mon,fri", "--at", "09:30", "--timezone", "Asia/Tokyo", env=env)
    try:
        counts = [json.loads(line) for line in notee("subscribers", env=env).stdout.splitlines()]
        assert counts == [
            {"method": "CYCLE", "type": "daily", "subscribers": 1},
            {"method": "TOPIC", "type": "news", "subscribers": 2},
        ]
        topics = [json.loads(line) for line in notee("topics", "--limit", "5", env=env).stdout.splitlines()]
        assert topics == [{"type": "news", "topic": "sports", "subscribers": 2}]
        cal = notee("calendar", "--hours", "168", env=env)  # a week: both of the schedule's days
        minutes = [json.loads(line) for line in cal.stdout.splitlines()]
        assert cal.returncode == 0 and len(minutes) == 2, cal.stdout + cal.stderr
        assert {(t["day"], t["hour"], t["minute"], t["subscriptions"]) for m in minutes for t in m["templates"]} == {
            ("MON", 9, 30, 1),
            ("FRI", 9, 30, 1),
        }
        assert cal.stderr.strip() == "2 minute(s), 2 subscription(s) due"
        notee("publish", "news", "sports", env=env)
        summary = json.loads(notee("summary", "--hours", "2", env=env).stdout)
        assert summary["service"] == service_id and summary["totals"]["jobs"] == 1 and len(summary["hours"]) == 2
        every = [json.loads(line) for line in notee("admin", "summary", env=admin_env).stdout.splitlines()]
        assert next(s for s in every if s["service"] == service_id)["totals"]["jobs"] == 1
        listed = notee("admin", "jobs", service_id, "--method", "TOPIC", env=admin_env).stdout.splitlines()
        assert [json.loads(line)["target"] for line in listed] == [{"topic": "sports"}]
        admin_cal = notee("admin", "calendar", "--hours", "168", "--service", service_id, env=admin_env)
        assert admin_cal.returncode == 0 and len(admin_cal.stdout.splitlines()) == 2, admin_cal.stderr
        bad = notee("calendar", "--hours", "1000", env=env)
        assert bad.returncode == 2 and bad.stderr.startswith("error: 422") and bad.stderr.count("\n") == 1
    finally:  # the scheduler tests share the due index
        st = runtime.statements
        stamp = time.time_ns() // 1000 + 1
        for tz, day, hour, minute, due_key, service in list(st.scan_due()):
            if service == service_id:
                st.delete_due(stamp, tz, day, hour, minute, due_key)


def test_webhook_endpoints_from_the_cli(admin_env, service_id):
    from tests.support.logscan import remember_secret

    notee("admin", "service", "create", service_id, "--name", "Hooks", env=admin_env)
    key = notee("admin", "key", "create", service_id, env=admin_env).stdout.strip()
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": key}
    bad = notee("webhook", "create", "https://127.0.0.1/x", env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("error: 422") and "url" in bad.stderr, bad.stderr
    made = notee("webhook", "create", "https://hooks.example.com/x", "--event", "token.pruned", env=env)
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    remember_secret(created["secret"])
    assert created["secret"].startswith("whsec_") and created["events"] == ["token.pruned"]
    listed = notee("webhook", "list", env=env).stdout
    assert created["endpoint_id"] in listed and created["secret"] not in listed and "secret" not in listed
    assert notee("webhook", "deliveries", created["endpoint_id"], env=env).stdout == ""
    gone = notee("webhook", "delete", created["endpoint_id"], env=env)
    assert gone.returncode == 0 and gone.stdout.startswith(f"webhook {created['endpoint_id']} deleted")
    assert notee("webhook", "list", env=env).stdout == ""
