"""The CLI's rich fields (docs/PAYLOADS.md): `notee template put --payload JSON`, and `notee send` /
`notee publish` with --payload and the flags of the common fields (--badge, --sound, --image,
--background), as a user runs them (subprocesses against a real `notee api`): what they send reaches
the API's rules (a bad field is the API's 422 naming it, exit 2)."""

from __future__ import annotations

import json

from tests.support.cli import notee, tenant_env


def test_template_payload_and_send_publish_flags_reach_the_api(admin_env, service_id):
    env = tenant_env(admin_env, service_id, "Rich")
    payload = {"android": {"channel_id": "orders"}, "ios": {"thread_id": "orders"}}
    put = notee(
        "template", "put", "SINGLE", "otp", "--title", "t", "--body", "b", "--payload", json.dumps(payload), env=env
    )
    assert put.returncode == 0, put.stderr
    assert json.loads(notee("template", "show", "SINGLE", "otp", env=env).stdout)["payload"] == payload
    notee("template", "put", "TOPIC", "news", "--title", "t", "--body", "b", env=env)
    user_id = notee("user", "put", "rich-1", env=env).stdout.strip()
    sent = notee("send", user_id, "otp", "--badge", "2", "--sound", "chime.caf", env=env)
    assert sent.returncode == 0 and sent.stdout.startswith("devices 0"), sent.stdout + sent.stderr
    bad = notee("send", user_id, "otp", "--payload", '{"android": {"color": "red"}}', env=env)
    assert bad.returncode == 2 and "payload.android.color" in bad.stderr, bad.stderr
    silent = notee("publish", "news", "all", "--background", env=env)  # the template has a title: not silent
    assert silent.returncode == 2 and "background" in silent.stderr, silent.stderr
    image = notee("publish", "news", "all", "--image", "http://not-https.example/a.png", env=env)
    assert image.returncode == 2 and "payload.image" in image.stderr, image.stderr
    not_json = notee("publish", "news", "all", "--payload", "{", env=env)
    assert not_json.returncode == 2 and "--payload" in not_json.stderr, not_json.stderr
