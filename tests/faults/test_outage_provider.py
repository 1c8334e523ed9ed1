"""The provider refuses connections for 60 s mid-publish (issue 14, item 2).

Two real ``notee worker`` processes send to the emulator through a TCP switch (tests/support/tcp_switch.py):
once a fifth is sent, the switch closes the port (connections refused, open ones cut) for 60 s and
then listens again; the emulator itself keeps running and keeps its counts. Each worker's circuit
breaker must open, its tasks be released without advancing, and probes resume sending once the
provider is back: no valid token is dead-lettered, every device is reached, duplicates stay within
one page per lane for the one interruption.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.faults.conftest import dead_letters_of, outage_releases, task_attempts, wait_sent
from tests.support.emulator import census
from tests.support.fanout import seed_topic, topic_job, topic_template, wait_job
from tests.support.processes import subprocess_env
from tests.support.tcp_switch import TcpSwitch

pytestmark = pytest.mark.faults

DEVICES = 20_000
UNUSED = 20_000  # numbers nobody holds first, so the devices span slots 0 and 1: two tasks
OUTAGE_S = 60.0
WORKERS, LANES = 2, 2


def test_provider_refuses_connections_for_60_s_mid_publish(runtime, emulator, processes, service_id, settings):
    key = topic_template(runtime, service_id, "news")
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", UNUSED)
    tokens = seed_topic(runtime, service_id, "news", key, "all", DEVICES)
    job = topic_job(runtime, service_id, key, "all", variables={"name": "provider outage"})
    assert job.task_count == 2
    port = int(emulator.url.rsplit(":", 1)[1])
    with TcpSwitch("127.0.0.1", port) as switch:
        env = subprocess_env(
            NOTEE_EMULATOR_URL=f"https://localhost:{switch.port}",
            NOTEE_FANOUT_LEASE_S="10",
            NOTEE_FANOUT_BREAKER_MAX_OPEN_S="8",
            NOTEE_FANOUT_OUTAGE_BACKOFF_CAP_S="8",
        )
        workers = [
            processes.start(
                f"provider-outage-worker-{i}", ["worker", "--service", service_id, "--lanes", str(LANES)], env
            )
            for i in range(WORKERS)
        ]
        sent_at_outage = wait_sent(runtime, job.job_id, DEVICES // 5)
        t0 = time.monotonic()
        switch.off()
        try:
            time.sleep(OUTAGE_S)
        finally:
            switch.on()
        outage_s = time.monotonic() - t0
        done, progress = wait_job(runtime, service_id, job.job_id, timeout=600, workers=workers)
        finished_s = time.monotonic() - t0 - outage_s
    seen = census(emulator, tokens)
    letters = dead_letters_of(runtime, job.job_id)
    attempts = task_attempts(runtime, job.job_id)
    breaker_opened = sum(w.log_path.read_text(errors="replace").count("circuit open for") for w in workers)
    print(
        f"\nprovider outage: devices targeted={seen.targeted} delivered={seen.delivered} "
        f"duplicated={seen.duplicated} (extra deliveries {seen.extra_deliveries}); connections refused for "
        f"{outage_s:.1f} s from sent={sent_at_outage}; job done {finished_s:.1f} s after the provider returned; "
        f"job sent={progress.sent} failed={progress.failed}; dead letters {letters}; breaker opened "
        f"{breaker_opened} times; {outage_releases(workers)} outage releases; task attempts {attempts}"
    )
    assert breaker_opened >= 1, "no circuit breaker opened: the outage never reached the workers"
    assert done.state == "done", (done.error, progress)
    assert letters == 0 and progress.failed == 0, "a valid token was dead-lettered for a transport error"
    assert seen.missing == [], f"{len(seen.missing)} devices never reached, e.g. {seen.missing[:5]}"
    assert seen.delivered == DEVICES
    # The page each lane was sending when the port closed is sent again once (it was not checkpointed).
    assert seen.extra_deliveries <= WORKERS * LANES * settings.fanout_fetch_size
    assert max(attempts) <= 2, f"the outage was counted as attempts: {attempts}"
    for w in workers:
        w.signal(signal.SIGTERM)
