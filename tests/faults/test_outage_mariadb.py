"""MariaDB killed for 30 s while workers run a publish (issue 14, item 1).

The killable MariaDB (127.0.0.1:3307) holds the jobs; Cassandra is the shared single node. Two
real ``notee worker`` processes fan out to the emulator. Once a fifth is sent MariaDB is SIGKILLed,
kept down 30 s and started again (InnoDB crash recovery). The workers cannot claim, checkpoint or
release meanwhile; they back off and carry on from their checkpoints: the job completes, every
device is reached, duplicates stay within one page per lane for the one interruption.
"""

from __future__ import annotations

import signal
import time

import pytest

from notee.store.runtime import Runtime
from tests.faults.conftest import outage_releases, task_attempts, wait_sent
from tests.support.emulator import census
from tests.support.fanout import seed_topic, topic_job, topic_template, wait_job
from tests.support.processes import settings_from, subprocess_env

pytestmark = pytest.mark.faults

DEVICES = 20_000
UNUSED = 20_000  # numbers nobody holds first, so the devices span slots 0 and 1: two tasks
OUTAGE_S = 30.0
WORKERS, LANES = 2, 2


def test_mariadb_killed_for_30_s_while_workers_run(killable_mariadb, emulator, processes, service_id, settings):
    db = killable_mariadb
    env = subprocess_env(
        NOTEE_MYSQL_URL=db.url,
        NOTEE_MYSQL_CONNECT_TIMEOUT_S="2",
        NOTEE_FANOUT_LEASE_S="10",
        NOTEE_FANOUT_OUTAGE_BACKOFF_CAP_S="8",
    )
    runtime = Runtime(settings_from(env))
    try:
        key = topic_template(runtime, service_id, "news")
        runtime.statements.allocate_numbers(service_id, "TOPIC", "news", UNUSED)
        tokens = seed_topic(runtime, service_id, "news", key, "all", DEVICES)
        job = topic_job(runtime, service_id, key, "all", variables={"name": "mariadb outage"})
        assert job.task_count == 2
        workers = [
            processes.start(
                f"mariadb-outage-worker-{i}", ["worker", "--service", service_id, "--lanes", str(LANES)], env
            )
            for i in range(WORKERS)
        ]
        sent_at_outage = wait_sent(runtime, job.job_id, DEVICES // 5)
        t0 = time.monotonic()
        db.kill()
        try:
            time.sleep(OUTAGE_S)
        finally:
            restart_at = time.monotonic()
            db.start()
        outage_s = restart_at - t0  # the server may answer before start() notices
        done, progress = wait_job(runtime, service_id, job.job_id, timeout=600, workers=workers)
        finished_s = time.monotonic() - restart_at
        seen = census(emulator, tokens)
        attempts = task_attempts(runtime, job.job_id)
    finally:
        runtime.close()
    print(
        f"\nmariadb outage: devices targeted={seen.targeted} delivered={seen.delivered} "
        f"duplicated={seen.duplicated} (extra deliveries {seen.extra_deliveries}); outage {outage_s:.1f} s at "
        f"sent={sent_at_outage}; job done {finished_s:.1f} s after the restart began; job sent={progress.sent} "
        f"failed={progress.failed}; {outage_releases(workers)} outage releases; task attempts {attempts}"
    )
    assert done.state == "done", (done.error, progress)
    assert seen.missing == [], f"{len(seen.missing)} devices never reached, e.g. {seen.missing[:5]}"
    assert seen.delivered == DEVICES and progress.failed == 0
    # The page each lane had in flight may be sent again (its checkpoint could not be written).
    assert seen.extra_deliveries <= WORKERS * LANES * settings.fanout_fetch_size
    assert max(attempts) <= 2, f"the outage was counted as attempts: {attempts}"
    for w in workers:
        w.signal(signal.SIGTERM)
