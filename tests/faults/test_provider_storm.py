"""Provider storm mid-publish (issue 9, item 3).

While two real ``notee worker`` processes fan out a 40,000-device topic (two slot tasks), the
emulator answers every FCM request with 429 (QUOTA_EXCEEDED, the project's quota) or 503
(UNAVAILABLE) and ``Retry-After: 5`` for 30 seconds: a device in flight when it begins is refused
six times or more, more than its ``fanout_max_attempts`` (5). Those refusals are the provider's,
not the device's, so the page waits them out (``fanout_provider_wait_s``).
Afterwards every device must have been delivered to, nothing dead-lettered or failed, and the
retries must have honoured Retry-After: no token may have been tried more often than the storm's
length allows at one attempt per Retry-After period.

The emulator's faults are count-based (``times``), so a storm is kept alive for 30 s by topping up
a "*" fault in small chunks, then ended by consuming what is left with requests for a throw-away
token (not one of the publish's devices).
"""

from __future__ import annotations

import math
import ssl
import threading
import time

import httpx
import pytest
from sqlalchemy import text

from tests.support.emulator import census
from tests.support.fanout import seed_topic, topic_job, topic_template, wait_job
from tests.support.processes import subprocess_env

pytestmark = pytest.mark.faults

DEVICES = 40_000  # two slots, so two tasks (two worker lanes) are in flight when the storm hits
STORM_S = 30.0
RETRY_AFTER_S = 5  # six refusals in the storm: more than a device's 5 attempts
CHUNK = 400


class Storm:
    """Keeps ``*`` FCM faults (429 and 503 alternately, with Retry-After) available for ``seconds``."""

    def __init__(self, emulator, seconds: float) -> None:
        self.emu = emulator
        self.seconds = seconds
        self.started = self.ended = 0.0
        self.chunks = 0
        self.thread = threading.Thread(target=self._run, name="storm", daemon=True)
        self.error: BaseException | None = None

    def remaining(self) -> int:
        return sum(f["remaining"] for f in self.emu.stats()["faults"])

    def _add(self) -> None:
        status = (429, 503)[self.chunks % 2]
        self.emu.fault("fcm", status, times=CHUNK, retry_after=RETRY_AFTER_S)
        self.chunks += 1

    def _run(self) -> None:
        try:
            self.started = time.monotonic()
            self._add()
            while time.monotonic() - self.started < self.seconds:
                if self.remaining() < CHUNK // 2:
                    self._add()
                time.sleep(0.05)
            self._drain()
            self.ended = time.monotonic()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _drain(self) -> None:
        body = {"message": {"token": "storm-drain-token", "notification": {"title": "x"}}}
        with httpx.Client(
            base_url=self.emu.url, verify=ssl.create_default_context(cafile=self.emu.ca_file), timeout=10
        ) as client:
            while self.remaining() > 0:
                for _ in range(50):
                    client.post(
                        "/v1/projects/drain/messages:send", json=body, headers={"Authorization": "Bearer drain"}
                    )


def test_storm_of_429_and_503_mid_publish(runtime, emulator, processes, service_id, settings):
    key = topic_template(runtime, service_id, "news")
    tokens = seed_topic(runtime, service_id, "news", key, "storm", DEVICES)
    job = topic_job(runtime, service_id, key, "storm")
    env = subprocess_env(
        NOTEE_EMULATOR_URL=emulator.url, NOTEE_EMULATOR_CA_FILE=emulator.ca_file, SSL_CERT_FILE=emulator.ca_file
    )
    workers = [
        processes.start(f"storm-worker-{i}", ["worker", "--service", service_id, "--lanes", "2"], env) for i in range(2)
    ]

    from notee.usecases.jobs import job_status

    deadline = time.monotonic() + 300
    while True:
        with runtime.sessions() as s:
            current, progress = job_status(s, service_id, job.job_id)
        if progress.sent >= DEVICES // 5 or current.state in ("done", "failed"):
            break
        assert time.monotonic() < deadline, f"no progress before the storm: {progress}"
        time.sleep(0.1)
    assert current.state == "running", "the publish finished before the storm began"
    sent_before = progress.sent

    storm = Storm(emulator, STORM_S)
    storm.thread.start()
    storm.thread.join(STORM_S + 120)
    assert storm.error is None, storm.error
    storm_s = storm.ended - storm.started
    faults = emulator.stats()["counts"]

    done, progress = wait_job(runtime, service_id, job.job_id, timeout=600, workers=workers)
    assert done.state == "done", (done.error, progress)
    seen = census(emulator, tokens)
    with runtime.engine.connect() as conn:
        dead = conn.execute(text("SELECT COUNT(*) FROM dead_letter WHERE service = :s"), {"s": service_id}).scalar()
    faulted = {t: n for t, n in seen.attempts.items() if n > 1}
    # One attempt per Retry-After period while the storm lasts, plus the attempt that succeeded and
    # the one already in flight when the storm began.
    bound = math.ceil(storm_s / RETRY_AFTER_S) + 2
    print(
        f"\nprovider storm: devices targeted={seen.targeted} delivered={seen.delivered} "
        f"duplicated={seen.duplicated}; storm {storm_s:.1f} s of 429/503 Retry-After {RETRY_AFTER_S} s "
        f"({faults.get('fcm.fault', 0)} faulted answers, {storm.chunks} chunks), began at sent={sent_before}; "
        f"{len(faulted)} devices retried, max attempts per device {seen.max_attempts} (bound {bound}); "
        f"job sent={progress.sent} failed={progress.failed} retried={progress.retried}; dead letters={dead}"
    )
    assert seen.missing == [], (
        f"{len(seen.missing)} devices never delivered, e.g. {seen.missing[:5]} "
        f"(attempts {[seen.attempts[t] for t in seen.missing[:5]]}; job failed={progress.failed}, dead letters={dead})"
    )
    assert progress.failed == 0 and dead == 0
    assert seen.max_attempts > runtime.settings.fanout_max_attempts, "no device was refused more than its attempts"
    assert faulted, "the storm hit no device: it did not happen mid-publish"
    assert seen.max_attempts <= bound, "retries came faster than Retry-After allows"
    assert progress.retried >= len(faulted)
