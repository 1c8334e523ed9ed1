"""Drive a Notee emulator from Python: its ``/_emu`` control API, and a local one started on a free
port (tests, benchmarks, a developer's script against a staging emulator).

    with local_emulator() as emu:          # or attach("https://host:8443", "ca.crt")
        os.environ.update(emu.env())       # point Notee (and its children) at it
        emu.fcm_tokens(UNREGISTERED=["t1"])
        emu.fault("fcm", 503, code="UNAVAILABLE", retry_after=1, times=3)
        ...
        emu.deliveries("t2"), emu.stats()
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from notee.emulator import scratch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class EmulatorControl:
    url: str
    ca_file: str
    http: httpx.Client
    pid: int = 0  # of the process, when this module started it
    apns_url: str | None = None  # the APNs port of a realistic emulator

    def _post(self, path: str, body: dict[str, Any]) -> None:
        self.http.post(f"/_emu/{path}", json=body).raise_for_status()

    def env(self) -> dict[str, str]:
        """Environment that points Notee and the SDKs' HTTP clients at this emulator."""
        env = {
            "SSL_CERT_FILE": self.ca_file,
            "REQUESTS_CA_BUNDLE": self.ca_file,
            "NO_PROXY": "127.0.0.1,localhost",
            "NOTEE_EMULATOR_URL": self.url,
            "NOTEE_EMULATOR_CA_FILE": self.ca_file,
        }
        if self.apns_url:
            env["NOTEE_EMULATOR_APNS_URL"] = self.apns_url
        return env

    def realistic(self, **switches: Any) -> dict[str, Any]:
        """Change how real the emulator is (``notee.emulator.state.Realism`` fields, plus
        apns_first_streams / apns_max_streams / apns_goaway_after / apns_answer_delay_ms on a realistic
        emulator, fcm_goaway_after on the FCM port's front)."""
        r = self.http.post("/_emu/realistic", json=switches)
        r.raise_for_status()
        answer: dict[str, Any] = r.json()
        return answer

    def access_token(self) -> str:
        """An FCM access token from the emulator's OAuth endpoint (what a service account's
        token_uri returns), for a test client that is not a service account."""

        def part(obj: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

        assertion = (
            f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part({'iss': 'test@emulator', 'iat': int(time.time())})}.x"
        )
        r = self.http.post(
            "/token", data={"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion}
        )
        r.raise_for_status()
        return str(r.json()["access_token"])

    def apns_goaway(self) -> int:
        """GOAWAY on every open APNs connection now; returns how many."""
        return self._on_connections("apns/goaway")

    def apns_reset(self) -> int:
        """A TCP reset (RST) on every open APNs connection now, mid-stream; returns how many."""
        return self._on_connections("apns/reset")

    def fcm_goaway(self) -> int:
        """GOAWAY on every open HTTP/2 connection of the FCM port now; returns how many."""
        return self._on_connections("fcm/goaway")

    def fcm_reset(self) -> int:
        """A TCP reset (RST) on every open HTTP/2 connection of the FCM port now, mid-stream; returns how many."""
        return self._on_connections("fcm/reset")

    def _on_connections(self, path: str) -> int:
        """POST /_emu/<path> (a fault on every open connection of a port); how many it reached."""
        r = self.http.post(f"/_emu/{path}", json={})
        r.raise_for_status()
        return int(r.json()["connections"])

    def reset(self) -> None:
        self._post("reset", {})

    def fcm_tokens(self, **by_code: list[str]) -> None:
        """e.g. ``fcm_tokens(UNREGISTERED=["t1"], INVALID_ARGUMENT=["t2"])``."""
        self._post("fcm/tokens", by_code)

    def apns_tokens(self, **by_kind: list[str]) -> None:
        """kinds: unregistered (410), invalid (400 BadDeviceToken), not_for_topic, expired."""
        self._post("apns/tokens", by_kind)

    def fault(
        self,
        api: str,
        status: int,
        *,
        match: str = "*",
        times: int = 1,
        code: str | None = None,
        retry_after: str | int | None = None,
    ) -> None:
        body: dict[str, Any] = {"api": api, "status": status, "match": match, "times": times}
        if code:
            body["code"] = code
        if retry_after is not None:
            body["retry_after"] = str(retry_after)
        self._post("faults", body)

    def web_subscribe(
        self, flavor: str = "fcm", application_server_key: str | None = None, origin: str | None = None
    ) -> dict[str, Any]:
        """A browser push subscription at this emulator (``PushSubscription.toJSON()`` plus its ``id``):
        ``flavor`` fcm, mozilla or apple answers like that push service; with
        ``application_server_key``, pushes signed by another VAPID key are refused (401 or 403, as
        that push service answers). ``origin``: the endpoint's origin when it is not the emulator's
        URL (a TCP forwarder in front of it, say)."""
        body: dict[str, Any] = {"origin": origin or self.url, "flavor": flavor}
        if application_server_key is not None:
            body["application_server_key"] = application_server_key
        r = self.http.post("/_emu/webpush/subscribe", json=body)
        r.raise_for_status()
        answer: dict[str, Any] = r.json()
        return answer

    def web_pushes(self, sub_id: str) -> list[dict[str, Any]]:
        """What the subscription received, decrypted: ``payload``, ``ttl``, ``urgency``, ``topic``, ``vapid`` claims."""
        r = self.http.get("/_emu/webpush/pushes", params={"id": sub_id})
        r.raise_for_status()
        pushes: list[dict[str, Any]] = r.json()["pushes"]
        return pushes

    def web_answers(self, sub_id: str) -> list[dict[str, Any]]:
        """Every request the subscription's push service answered, oldest first: ``at`` (epoch s), ``status``."""
        r = self.http.get("/_emu/webpush/pushes", params={"id": sub_id})
        r.raise_for_status()
        answers: list[dict[str, Any]] = r.json()["answers"]
        return answers

    def web_gone(self, *sub_ids: str, status: int = 410) -> None:
        """The browser unsubscribed: the push service answers ``status`` (404 or 410) from now on."""
        self._post("webpush/gone", {"ids": list(sub_ids), "status": status})

    def latency(self, ms: float) -> None:
        self._post("latency", {"ms": ms})

    def reject_bearer(self, *bearers: str) -> None:
        self._post("auth/reject", {"bearers": list(bearers)})

    def deliveries(self, token: str) -> dict[str, Any]:
        """{"token", "fcm", "apns", "attempts"} of one token."""
        answer: dict[str, Any] = self.http.get("/_emu/deliveries", params={"token": token}).json()
        return answer

    def deliveries_of(self, tokens: list[str], batch: int = 5000) -> dict[str, dict[str, int]]:
        """``deliveries`` of many tokens, a batch per request: token -> {"fcm", "apns", "attempts"}."""
        out: dict[str, dict[str, int]] = {}
        for i in range(0, len(tokens), batch):
            r = self.http.post("/_emu/deliveries", json={"tokens": tokens[i : i + batch]})
            r.raise_for_status()
            for row in r.json()["deliveries"]:
                out[row.pop("token")] = row
        return out

    def last_request(self, token: str) -> dict[str, Any] | None:
        r = self.http.get("/_emu/requests/last", params={"token": token})
        if r.status_code != 200:
            return None
        last: dict[str, Any] = r.json()
        return last

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.http.get("/_emu/stats").json()
        return stats

    def delivered(self) -> int:
        return sum(self.stats().get("delivered", {}).values())


def _client(url: str, ca_file: str) -> httpx.Client:
    return httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=ca_file), timeout=10)


def attach(url: str, ca_file: str) -> EmulatorControl:
    """Control an emulator that is already running (a realistic one tells its APNs port)."""
    client = _client(url, ca_file)
    peer = client.get("/_emu/stats").json().get("apns_peer")
    apns_url = f"https://{urlsplit(url).hostname}:{peer['port']}" if peer else None
    return EmulatorControl(url, ca_file, client, apns_url=apns_url)


# The providers' own host names, held by a local emulator's certificate too: a client that cannot be
# pointed at another address reaches the emulator through a CONNECT proxy (bench/gorush.py).
PROVIDER_HOSTS = ("fcm.googleapis.com", "oauth2.googleapis.com", "api.sandbox.push.apple.com", "api.push.apple.com")


@contextmanager
def local_emulator(
    timeout_s: float = 30, *, realistic: bool = False, names: Sequence[str] = PROVIDER_HOSTS
) -> Iterator[EmulatorControl]:
    """Start ``notee emulator`` on a free loopback port with a fresh test CA; stop it on exit.
    ``realistic``: ``notee emulator --realistic`` with APNs on a second free port. ``names``: further
    host names its certificate holds (``--name``)."""
    state_dir = scratch.make_dir()  # stale ones (a SIGKILLed run's) removed first
    port = free_port()
    url, ca_file = f"https://localhost:{port}", str(state_dir / "ca.crt")
    args = [
        sys.executable,
        "-m",
        "notee",
        "emulator",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--state-dir",
        str(state_dir),
    ]
    apns_url = None
    if realistic:
        apns_port = free_port()
        apns_url = f"https://localhost:{apns_port}"
        args += ["--realistic", "--apns-port", str(apns_port)]
    for name in names:
        args += ["--name", name]
    # its log into a file, not a pipe: nobody reads a pipe while it runs, and a full one would stall it
    log_path = state_dir / "emulator.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log_file)
    scratch.own(state_dir, proc.pid)  # kept while the emulator runs, even if this process is killed
    client = None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                err = log_path.read_bytes()
                raise RuntimeError(f"emulator exited: {err.decode(errors='replace')[-2000:]}")
            if Path(ca_file).exists():
                try:
                    client = client or _client(url, ca_file)
                    if client.get("/_emu/stats").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                except ssl.SSLError:  # the CA file exists but is still being written
                    client = None
            if time.monotonic() > deadline:
                raise RuntimeError(f"emulator did not answer within {timeout_s} s")
            time.sleep(0.1)
        yield EmulatorControl(url, ca_file, client, proc.pid, apns_url)
    finally:
        if client is not None:
            client.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(state_dir, ignore_errors=True)  # its CA and log: nothing reads them once it is gone
