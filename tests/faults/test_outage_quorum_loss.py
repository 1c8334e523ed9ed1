"""Cassandra quorum lost for 60 s mid-publish (issue 14, item 1).

A 3-node cluster (RF 3, QUORUM) holds the subscribers; two real ``notee worker`` processes fan out
to the emulator. Once a fifth is sent, nodes 2 and 3 are frozen (SIGSTOP) for 60 s: no page read
can reach a quorum. The workers must release their tasks without advancing them (no attempt
counted, the job never failed), back off, and finish the job once the nodes answer again: every
device reached, duplicates within one page per lane for the one interruption.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.faults.conftest import outage_releases, task_attempts, wait_sent
from tests.support.emulator import census
from tests.support.fanout import seed_topic, topic_job, topic_template, wait_job

pytestmark = pytest.mark.faults

DEVICES = 20_000
UNUSED = 20_000  # numbers nobody holds first, so the devices span slots 0 and 1: two tasks
OUTAGE_S = 60.0
FROZEN = (2, 3)
WORKERS, LANES = 2, 2


def test_quorum_lost_for_60_s_mid_publish(fault_cluster, emulator, processes, service_id, settings):
    fault_cluster.ensure_whole()  # an earlier test may have killed a node
    runtime = fault_cluster.runtime
    key = topic_template(runtime, service_id, "news")
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", UNUSED)
    tokens = seed_topic(runtime, service_id, "news", key, "all", DEVICES)
    job = topic_job(runtime, service_id, key, "all", variables={"name": "quorum loss"})
    assert job.task_count == 2
    env = dict(
        fault_cluster.env,
        NOTEE_EMULATOR_URL=emulator.url,
        NOTEE_EMULATOR_CA_FILE=emulator.ca_file,
        SSL_CERT_FILE=emulator.ca_file,
        NOTEE_FANOUT_LEASE_S="10",
        NOTEE_FANOUT_OUTAGE_BACKOFF_CAP_S="8",
    )
    workers = [
        processes.start(f"quorum-loss-worker-{i}", ["worker", "--service", service_id, "--lanes", str(LANES)], env)
        for i in range(WORKERS)
    ]

    sent_at_outage = wait_sent(runtime, job.job_id, DEVICES // 5)
    t0 = time.monotonic()
    try:
        for node in FROZEN:
            fault_cluster.freeze(node)
        time.sleep(OUTAGE_S)
    finally:
        for node in FROZEN:
            fault_cluster.thaw(node)
    outage_s = time.monotonic() - t0
    done, progress = wait_job(runtime, service_id, job.job_id, timeout=600, workers=workers)
    finished_s = time.monotonic() - t0 - outage_s
    seen = census(emulator, tokens)
    attempts = task_attempts(runtime, job.job_id)
    releases = outage_releases(workers)
    print(
        f"\nquorum loss: devices targeted={seen.targeted} delivered={seen.delivered} duplicated={seen.duplicated} "
        f"(extra deliveries {seen.extra_deliveries}); outage {outage_s:.1f} s (nodes {FROZEN} frozen) at "
        f"sent={sent_at_outage}; job done {finished_s:.1f} s after the nodes returned; job sent={progress.sent} "
        f"failed={progress.failed}; {releases} outage releases; task attempts {attempts}"
    )
    assert releases >= 1, "the workers never saw the outage: the test proved nothing"
    assert done.state == "done", (done.error, progress)
    assert seen.missing == [], f"{len(seen.missing)} devices never reached, e.g. {seen.missing[:5]}"
    assert seen.delivered == DEVICES and progress.failed == 0
    # A page read that fails is never sent, so duplicates come only from a page sent whose checkpoint
    # was lost: at most one page per lane for this one interruption.
    assert seen.extra_deliveries <= WORKERS * LANES * settings.fanout_fetch_size
    assert max(attempts) <= 2, f"outage releases were counted as attempts: {attempts}"
    for w in workers:
        w.signal(signal.SIGTERM)
