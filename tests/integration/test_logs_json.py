"""NOTEE_LOG_FORMAT=json (issue 16.2): one JSON object per line from real `notee api`, `notee worker`
and `notee emulator` processes (the scheduler's: tests/integration/test_metrics.py), with the request id, job id
and service where there is one; the access log included; third-party chatter at WARNING.

The rules of this topic that need no server are in tests/unit/test_logs_json.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.fanout import job_progress, seed_topic, topic_job, topic_template
from tests.support.processes import Processes, free_port, subprocess_env
from tests.support.registry import admin_headers
from tests.support.waiting import wait_for

JSON_ENV = {"NOTEE_LOG_FORMAT": "json", "NOTEE_LOG_LEVEL": "INFO"}


def _json_lines(path: Path) -> list[dict[str, object]]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines, "the process logged nothing"
    parsed = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:  # every line, not just most of them
            raise AssertionError(f"not a JSON line: {line!r}") from exc
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message"} <= record.keys(), line
        assert str(record["time"]).endswith("Z"), line  # RFC 3339, UTC
        parsed.append(record)
    return parsed


def _new_service(url: str, settings) -> tuple[str, str]:
    service = "LOG" + __import__("secrets").token_hex(4).upper()
    r = httpx.post(
        url + "/v1/admin/services",
        json={"service": service, "display_name": "logs"},
        headers=admin_headers(settings),
        timeout=30,
    )
    assert r.status_code == 201, r.text
    r = httpx.post(url + f"/v1/admin/services/{service}/api-keys", json={}, headers=admin_headers(settings), timeout=30)
    assert r.status_code == 201, r.text
    return service, r.json()["api_key"]


def test_api_process_logs_json_with_request_id_access_line_and_service(
    processes: Processes, settings, migrated
) -> None:
    api = processes.api(**JSON_ENV)
    log_path = api.log_path
    assert log_path is not None
    r = httpx.get(api.url + "/healthz", headers={"X-Request-ID": "abc-123"}, timeout=10)
    assert r.status_code == 200 and r.headers["X-Request-ID"] == "abc-123"
    insane = httpx.get(api.url + "/healthz", headers={"X-Request-ID": "no spaces or {braces}"}, timeout=10)
    replaced = insane.headers["X-Request-ID"]
    assert replaced != "no spaces or {braces}" and replaced.isalnum()
    service, key = _new_service(api.url, settings)
    authed_r = httpx.get(
        api.url + "/v1/users/nobody",
        headers={"Authorization": f"Bearer {key}", "X-Request-ID": "authed-1"},
        timeout=10,
    )
    assert authed_r.status_code < 500 and authed_r.headers["X-Request-ID"] == "authed-1"
    api.stop()  # every access line is written once the process has stopped
    records = _json_lines(log_path)
    access = [rec for rec in records if rec["logger"] == "notee.access"]
    (health,) = [rec for rec in access if rec.get("request_id") == "abc-123"]
    assert health["method"] == "GET" and health["path"] == "/healthz" and health["status"] == 200
    assert isinstance(health["duration_ms"], float) and "service" not in health
    assert any(rec.get("request_id") == replaced for rec in access)
    (authed,) = [rec for rec in access if rec.get("request_id") == "authed-1"]
    assert (
        authed["service"] == service
        and authed["status"] == authed_r.status_code
        and authed["path"] == "/v1/users/nobody"
    )
    assert any(rec["logger"].startswith("uvicorn") for rec in records)  # uvicorn's own lines are JSON too
    text = log_path.read_text(encoding="utf-8")
    assert key not in text and settings.admin_token.get_secret_value() not in text


def test_worker_process_task_lines_carry_job_id_and_service(
    processes: Processes, runtime, service_id, emulator
) -> None:
    key = topic_template(runtime, service_id)
    seed_topic(runtime, service_id, "news", key, "logs", 5)
    job = topic_job(runtime, service_id, key, "logs")
    worker = processes.worker(service_id, lanes=1, **JSON_ENV)
    try:
        wait_for(lambda: job_progress(runtime, job.job_id)[0].state == "done", timeout=60, what="job done")
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    log_path = worker.log_path
    assert log_path is not None
    records = _json_lines(log_path)
    (done,) = [
        rec
        for rec in records
        if str(rec["message"]).startswith(f"task {job.job_id}/") and "done" in str(rec["message"])
    ]
    assert done["job_id"] == job.job_id and done["service"] == service_id
    assert all("job_id" not in rec for rec in records if "stopped after" in str(rec["message"]))


def test_emulator_process_logs_json_including_granian_and_its_worker_process(tmp_path: Path) -> None:
    """granian logs through its own dictConfig: Notee hands it the JSON formatter, in its worker
    process too. The start banner for a person stays on stdout."""
    port = free_port()
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "notee", "emulator", "--port", str(port), "--state-dir", str(tmp_path / "emu")],
            env=subprocess_env(**JSON_ENV),
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_for(lambda: "Started worker" in err.read_text(), timeout=60, what="granian's worker to start")
    finally:
        proc.terminate()
        proc.wait(20)
    records = _json_lines(err)
    granian = [rec for rec in records if str(rec["logger"]).startswith("_granian")]
    assert any("Listening at" in str(rec["message"]) for rec in granian), records
    assert len({rec["pid"] for rec in granian}) == 2, granian  # the server and its worker process
    assert "notee emulator on https://" in out.read_text()
