"""Liveness and readiness (docs/API.md "Probes"): /livez never reads a store, so a store outage
does not make an orchestrator restart the API; /readyz (and /healthz, its older name) says which
store is down. Both carry Notee's version, as does `notee --version`."""

from __future__ import annotations

import subprocess
import sys

from fastapi.testclient import TestClient

from notee.api.app import create_app
from notee.core.settings import Settings
from notee.core.version import VERSION
from notee.store.runtime import Runtime


def test_liveness_reads_no_store_and_readiness_names_the_store_that_is_down(settings: Settings) -> None:
    broken = settings.model_copy(
        update={"mysql_url": settings.mysql_url.__class__("mysql+pymysql://notee:notee@127.0.0.1:1/notee_test")}
    )
    runtime = Runtime(broken)
    try:
        with TestClient(create_app(broken, runtime=runtime)) as c:
            live = c.get("/livez")
            ready, health = c.get("/readyz"), c.get("/healthz")
    finally:
        runtime.close()
    assert live.status_code == 200 and live.json() == {"status": "ok", "version": VERSION}
    for answer in (ready, health):
        body = answer.json()
        assert answer.status_code == 503, body
        assert (body["status"], body["version"], body["cassandra"]) == ("degraded", VERSION, "ok")
        assert body["mysql"].startswith("down: "), body


def test_the_api_and_the_command_report_the_installed_version(client) -> None:
    assert client.get("/openapi.json").json()["info"]["version"] == VERSION
    printed = subprocess.run([sys.executable, "-m", "notee", "--version"], capture_output=True, text=True, check=True)
    assert printed.stdout == f"notee {VERSION}\n"
