"""The backend half of the Web Push snippet in the SDK's README (clients/python/README.md, "Browsers"),
run as it is written against a real `notee api` process and the emulator's push service: the page's
VAPID key, a browser's subscription registered, a send reaching it decrypted, a malformed one refused,
the browser forgotten; and a second tenant's key sees none of it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import notee_sdk
import pytest
from notee_sdk import Client

from tests.support.tenants import new_service_id
from tests.support.webpush import token_of

README = Path(__file__).resolve().parents[2] / "clients" / "python" / "README.md"


def _backend(url: str, api_key: str) -> dict[str, Any]:
    """The README's ``backend.py`` block, executed with the test's API URL and key in its placeholders."""
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if b.startswith("# backend.py")]
    assert 'Client("http://127.0.0.1:8080", api_key="nk_...")' in block
    code = block.replace("http://127.0.0.1:8080", url).replace("nk_...", api_key)
    namespace: dict[str, Any] = {"__name__": "backend"}
    exec(compile(code, str(README), "exec"), namespace)  # the documented snippet, run as written
    return namespace


@pytest.fixture()
def services(api_process, settings, service_id):
    """Two services with an API key each, and the admin client."""
    with Client(api_process.url, admin_token=settings.admin_token.get_secret_value(), max_retries=0) as admin:
        keys = []
        for service in (service_id, new_service_id()):
            admin.create_service(service, f"SDK web {service}")
            keys.append(admin.create_api_key(service, label="sdk-web").api_key)
        yield admin, service_id, keys


def test_the_readmes_backend_registers_a_browser_that_then_receives_a_push(api_process, services, emulator):
    admin, service, (key, other_key) = services
    backend = _backend(api_process.url, key)
    notee: Client = backend["notee"]
    try:
        assert backend["vapid_public_key"]() is None  # no key pair yet: the page cannot subscribe
        public = admin.generate_vapid_key(service, "mailto:push@shop.example").public_key
        assert backend["vapid_public_key"]() == public

        sub = emulator.web_subscribe("mozilla", public)  # the page's subscribe with that key
        user = notee.put_user("web-ann", name="Ann").user_id
        as_json = {k: sub[k] for k in ("endpoint", "expirationTime", "keys")}  # subscription.toJSON()
        token = backend["save_subscription"](user, as_json)
        assert token == token_of(sub)
        assert [(d.token, d.os) for d in notee.list_devices(user)] == [(token, "WEB")]

        bad = {**as_json, "endpoint": as_json["endpoint"].replace("https:", "http:")}
        with pytest.raises(notee_sdk.ValidationFailed) as refused:
            backend["save_subscription"](user, bad)
        assert refused.value.status == 422 and refused.value.details[0]["loc"][-1] == "endpoint"
        assert len(notee.list_devices(user)) == 1  # nothing written

        notee.put_template("SINGLE", "hello", title="Hi {{name}}", body="Your order shipped")
        sent = notee.send_to_user(user, "hello", variables={"name": "Ann"})
        assert (sent.devices, sent.delivered, sent.failed) == (1, 1, 0), sent
        (push,) = emulator.web_pushes(sub["id"])
        assert push["decrypt_error"] is None
        assert (push["payload"]["title"], push["payload"]["body"]) == ("Hi Ann", "Your order shipped")
        assert push["vapid"]["sub"] == "mailto:push@shop.example"

        # another service's key: no VAPID key of its own, and neither the user nor the browser
        with Client(api_process.url, api_key=other_key, max_retries=0) as other:
            with pytest.raises(notee_sdk.NotFound):
                other.get_vapid_public_key()
            with pytest.raises(notee_sdk.NotFound):
                other.list_devices(user)
            with pytest.raises(notee_sdk.NotFound):
                other.delete_device(user, token)
        assert len(notee.list_devices(user)) == 1

        backend["forget_browser"](user, token)
        assert notee.list_devices(user) == []
    finally:
        notee.close()
