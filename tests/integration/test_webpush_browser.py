"""The browser snippet of docs/WEB-PUSH.md in a real browser (headless Chromium): its two blocks,
served as they are written there, register the service worker and subscribe; a push Notee encrypted
and the emulator decrypted is delivered to that service worker through the DevTools protocol
(``ServiceWorker.deliverPushMessage``: Chromium cannot be pointed at a custom push service), and the
test reads the notification the service worker showed and the message it posted to the page."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import websocket
from selenium.webdriver.support.ui import WebDriverWait

from tests.support import browser
from tests.support.logscan import log_dir
from tests.support.registry import admin_headers, new_template, new_user

pytestmark = pytest.mark.tenant(credentials=True)

DOC = Path(__file__).resolve().parents[2] / "docs" / "WEB-PUSH.md"
PAGE = """<!doctype html><meta charset="utf-8"><title>Notee web push test page</title>
<script src="/page.js"></script>
<script>
window.received = [];
navigator.serviceWorker.addEventListener('message', (e) => window.received.push(e.data.notee));
const key = new URLSearchParams(location.search).get('key');
window.settled = null;
subscribeToNotee(key, async (json) => { window.saved = json; }).then(
  (s) => { window.settled = {ok: true, endpoint: s && s.endpoint}; },
  (e) => { window.settled = {ok: false, name: e.name, message: e.message}; });
</script>
"""


def snippet(first_line: str) -> str:
    """The ```js block of docs/WEB-PUSH.md whose first line starts with ``first_line``."""
    for block in re.findall(r"```js\n(.*?)```", DOC.read_text(), re.S):
        if block.startswith(first_line):
            return str(block)
    raise AssertionError(f"docs/WEB-PUSH.md has no ```js block starting {first_line!r}")


@contextmanager
def site(folder: Path) -> Iterator[str]:
    """The test web site (the page, the snippet's page.js and sw.js) on http://localhost (a secure context)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.html").write_text(PAGE)
    (folder / "page.js").write_text(snippet("// page.js"))
    (folder / "sw.js").write_text(snippet("// sw.js"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class DevTools:
    """A DevTools protocol connection to the page (chromedriver's browser allows a second client)."""

    def __init__(self, b: browser.Browser) -> None:
        address = b.d.capabilities["goog:chromeOptions"]["debuggerAddress"]
        pages = [t for t in httpx.get(f"http://{address}/json/list").json() if t["type"] == "page"]
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.next_id = 0

    def call(self, method: str, params: dict | None = None, *, until=None) -> tuple[dict, list[dict]]:
        """Send one command; its answer and the events seen until it (and until ``until(events)``)."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        events, answer = [], None
        while answer is None or (until is not None and not until(events)):
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                answer = message
            elif "method" in message:
                events.append(message)
        assert "error" not in answer, answer
        return answer, events

    def close(self) -> None:
        self.ws.close()


def _registration(origin: str, events: list[dict]) -> str | None:
    for e in events:
        if e["method"] == "ServiceWorker.workerRegistrationUpdated":
            for reg in e["params"]["registrations"]:
                if reg["scopeURL"] == origin + "/" and not reg["isDeleted"]:
                    return str(reg["registrationId"])
    return None


def test_the_documented_snippet_shows_what_notee_sent(client, settings, tenant, emu_app):
    service, headers = tenant
    r = client.post(
        f"/v1/admin/services/{service}/credentials/webpush/generate",
        json={"subject": "mailto:ops@example.com"},
        headers=admin_headers(settings),
    )
    public = r.json()["public_key"]
    assert client.get("/v1/service/webpush", headers=headers).json()["public_key"] == public
    user = new_user(client, headers)
    sub = emu_app.web_subscribe("fcm", public)
    d = client.post(
        f"/v1/users/{user}/devices",
        json={"os": "WEB", "subscription": {"endpoint": sub["endpoint"], "keys": sub["keys"]}},
        headers=headers,
    )
    assert d.status_code == 201, d.text
    new_template(
        client,
        headers,
        "SINGLE",
        "order",
        title="Hi {{name}}",
        body="Order {{n}} shipped",
        data={"link": "/orders/{{n}}"},
    )
    sent = client.post(
        f"/v1/users/{user}/send", json={"type": "order", "variables": {"name": "Ann", "n": "42"}}, headers=headers
    )
    assert sent.json()["delivered"] == 1, sent.text
    (push,) = emu_app.web_pushes(sub["id"])
    assert push["decrypt_error"] is None

    folder = log_dir() / "webpush-browser"
    with site(folder / "site") as origin, browser.Browser(origin, folder) as b:
        b.d.execute_cdp_cmd("Browser.grantPermissions", {"origin": origin, "permissions": ["notifications"]})
        devtools = DevTools(b)
        try:
            devtools.call("ServiceWorker.enable")
            b.visit(f"/index.html?key={public}", "page")
            b.d.execute_async_script("navigator.serviceWorker.ready.then(() => arguments[0](true))")
            key = b.d.execute_script("return Array.from(urlBase64ToUint8Array(arguments[0]))", public)
            assert len(key) == 65 and key[0] == 4  # the applicationServerKey the snippet subscribes with
            _, events = devtools.call("ServiceWorker.enable", until=lambda ev: _registration(origin, ev))
            registration = _registration(origin, events)
            devtools.call(
                "ServiceWorker.deliverPushMessage",
                {"origin": origin, "registrationId": registration, "data": push["plaintext"]},
            )
            WebDriverWait(b.d, 30).until(lambda d: d.execute_script("return window.received.length") > 0)
            received = b.d.execute_script("return window.received")
            shown = b.d.execute_async_script(
                "navigator.serviceWorker.ready.then((r) => r.getNotifications())"
                ".then((ns) => arguments[0](ns.map((n) => ({title: n.title, body: n.body, data: n.data}))))"
            )
            b.record("pushed")
            # Headless Chromium has no push service of its own to subscribe at: the subscription stays
            # pending or ends in AbortError; a malformed applicationServerKey would be
            # InvalidAccessError, a bug of the snippet a TypeError.
            settled = b.d.execute_script("return window.settled")
            assert settled is None or settled["ok"] or settled["name"] in ("AbortError", "NotAllowedError"), settled
        finally:
            devtools.close()
    # the notification id (docs/ENGAGEMENT.md) travels in data, for the service worker to post receipts with
    expected = {"title": "Hi Ann", "body": "Order 42 shipped", "data": {"link": "/orders/42"}}
    nid = received[0]["data"].pop("notee_id")
    assert nid == shown[0]["data"].pop("notee_id") and nid.startswith(sent.json()["send_id"] + "."), nid
    assert received == [expected] and shown == [expected]
