"""The emulator as pytest fixtures, for any test that sends pushes.

Use it from a test module (or conftest) with::

    from tests.emulator_fixture import emulator, emulator_process  # noqa: F401

``emulator_process`` (session) starts ``notee emulator`` on a free port with a fresh test CA, exports
SSL_CERT_FILE / REQUESTS_CA_BUNDLE / NO_PROXY / NOTEE_EMULATOR_URL / NOTEE_EMULATOR_CA_FILE (before
any client is built) and stops the process by its pid. ``emulator`` (per test) resets its state
and hands back an :class:`Emulator` with the control API.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Emulator:
    url: str
    ca_file: str
    http: httpx.Client

    def _post(self, path: str, body: dict[str, Any]) -> None:
        self.http.post(f"/_emu/{path}", json=body).raise_for_status()

    def reset(self) -> None:
        self._post("reset", {})

    def fcm_tokens(self, **by_code: list[str]) -> None:
        """e.g. ``fcm_tokens(UNREGISTERED=["t1"], INVALID_ARGUMENT=["t2"])``."""
        self._post("fcm/tokens", by_code)

    def apns_tokens(self, **by_kind: list[str]) -> None:
        """kinds: unregistered (410), invalid (400 BadDeviceToken), not_for_topic, expired."""
        self._post("apns/tokens", by_kind)

    def fault(self, api: str, status: int, *, match: str = "*", times: int = 1, code: str | None = None,
              retry_after: str | int | None = None) -> None:
        body: dict[str, Any] = {"api": api, "status": status, "match": match, "times": times}
        if code:
            body["code"] = code
        if retry_after is not None:
            body["retry_after"] = str(retry_after)
        self._post("faults", body)

    def latency(self, ms: float) -> None:
        self._post("latency", {"ms": ms})

    def reject_bearer(self, *bearers: str) -> None:
        self._post("auth/reject", {"bearers": list(bearers)})

    def deliveries(self, token: str) -> dict[str, int]:
        return self.http.get("/_emu/deliveries", params={"token": token}).json()

    def last_request(self, token: str) -> dict[str, Any] | None:
        r = self.http.get("/_emu/requests/last", params={"token": token})
        return r.json() if r.status_code == 200 else None

    def stats(self) -> dict[str, Any]:
        return self.http.get("/_emu/stats").json()


@pytest.fixture(scope="session")
def emulator_process() -> Iterator[Emulator]:
    state_dir = Path(tempfile.mkdtemp(prefix="notee-emu-"))
    port = _free_port()
    url = f"https://localhost:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "notee", "emulator", "--host", "127.0.0.1", "--port", str(port),
         "--state-dir", str(state_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    ca = state_dir / "ca.crt"
    client = None
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"emulator exited: {proc.stderr.read().decode()[-2000:]}")
            if ca.exists():
                try:
                    client = client or httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=str(ca)), timeout=10)
                    if client.get("/_emu/stats").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError("emulator did not answer within 30 s")
            time.sleep(0.1)
        saved = {k: os.environ.get(k) for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NO_PROXY",
                                                "NOTEE_EMULATOR_URL", "NOTEE_EMULATOR_CA_FILE")}
        os.environ.update({"SSL_CERT_FILE": str(ca), "REQUESTS_CA_BUNDLE": str(ca),
                           "NO_PROXY": "127.0.0.1,localhost", "NOTEE_EMULATOR_URL": url,
                           "NOTEE_EMULATOR_CA_FILE": str(ca)})
        yield Emulator(url=url, ca_file=str(ca), http=client)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    finally:
        if client is not None:
            client.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture()
def emulator(emulator_process: Emulator) -> Emulator:
    emulator_process.reset()
    return emulator_process
