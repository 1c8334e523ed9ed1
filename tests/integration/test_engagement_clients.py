"""Engagement from the clients (docs/ENGAGEMENT.md): a client key made with `notee admin key create
--client`, receipts posted with it through the Python SDK (what an app's backend or a test rig does),
and the figures read back with `notee stats` and the SDK, all against a real `notee api` process."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from notee_sdk import Client
from notee_sdk.models import SendResult

from notee.core import notification_id
from tests.support.cli import notee
from tests.support.registry import fcm_service_account, random_token


def test_receipts_through_the_sdk_and_figures_through_the_cli(cli_api, admin_env, service_id, emulator, tmp_path: Path):
    assert notee("admin", "service", "create", service_id, "--name", "Eng", env=admin_env).returncode == 0
    server_key = notee("admin", "key", "create", service_id, env=admin_env).stdout.strip()
    made = notee("admin", "key", "create", service_id, "--client", "--json", env=admin_env)
    assert made.returncode == 0, made.stderr
    client_key = json.loads(made.stdout)["api_key"]
    assert client_key.startswith("nck_") and json.loads(made.stdout)["kind"] == "client"
    account = tmp_path / "sa.json"
    account.write_text(json.dumps(fcm_service_account()))
    assert notee("admin", "credentials", "fcm", service_id, "--file", str(account), env=admin_env).returncode == 0
    token = random_token("cli-eng")
    with Client(cli_api.url, api_key=server_key) as server:
        user = server.put_user("eng-user").user_id
        server.add_device(user, token, "AOS")
        server.put_template("SINGLE", "promo", title="Hi", body="Sale")
        sent = server.send_to_user(user, "promo")
    assert isinstance(sent, SendResult)
    assert sent.delivered == 1 and sent.send_id
    seen = emulator.last_request(token)
    assert seen is not None
    nid = seen["body"]["data"][notification_id.KEY]
    now = datetime.now(UTC)
    with Client(cli_api.url, api_key=client_key) as app:
        events = [
            {"notification_id": nid, "event": "delivered", "at": now},
            {"notification_id": nid, "event": "opened", "at": now},
        ]
        assert app.post_receipts(events).accepted == 2
        assert app.post_receipts(events).duplicates == 2  # the SDK may resend a batch: counted once
    env = {k: v for k, v in admin_env.items() if k != "NOTEE_ADMIN_TOKEN"} | {"NOTEE_API_KEY": server_key}
    one = notee("stats", "--job", sent.send_id, "--json", env=env)
    assert one.returncode == 0, one.stderr
    counts = json.loads(one.stdout)["counts"]
    assert (counts["sent"], counts["delivered"], counts["opened"], counts["open_rate"]) == (1, 1, 1, 1.0)
    by_type = notee("stats", "--by", "type", env=env)
    assert by_type.returncode == 0 and by_type.stdout.startswith("promo: targeted=1 sent=1 delivered=1 opened=1")
    exported = notee("stats", "--job", sent.send_id, "--export", env=env)
    assert sorted(json.loads(line)["event"] for line in exported.stdout.splitlines()) == ["delivered", "opened"]
    with Client(cli_api.url, api_key=server_key) as server:
        assert server.get_stats("day").items[0].counts.opened == 1
    refused = notee("stats", "--by", "type", env=env | {"NOTEE_API_KEY": client_key})
    assert refused.returncode != 0 and "client key" in refused.stderr
