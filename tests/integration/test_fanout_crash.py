"""Crash safety and graceful stop with real `notee worker` processes, the real stores and the
emulator's per-token delivery counts.

SIGKILL mid-job: the lease expires, another worker resumes from the checkpoint: every device gets
the push, none more than twice, and the duplicates are at most the one page that was in flight.
SIGTERM mid-job: the worker finishes its in-flight page, checkpoints, releases its lease and exits 0;
the next worker resumes exactly there: every device exactly once.
"""

from __future__ import annotations

import signal

import pytest

from notee.store import jobs_sql
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import job_progress, seed_topic, topic_job, topic_template
from tests.support.waiting import wait_for

N = 3000
FETCH = 100
# Slow the pushes down (emulator latency, few in flight) so the kill lands mid-job.
WORKER_ENV = {"NOTEE_FANOUT_FETCH_SIZE": str(FETCH), "NOTEE_FANOUT_LEASE_S": "5", "NOTEE_FANOUT_SEND_CONCURRENCY": "20"}


@pytest.fixture()
def topic_job_seeded(runtime, service_id, emulator):
    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "crash", N)
    job = topic_job(runtime, service_id, key, "crash")
    emulator.latency(20)
    return job, tokens


def test_sigkill_mid_job_loses_at_most_one_page(runtime, service_id, emulator, topic_job_seeded, processes):
    job, tokens = topic_job_seeded
    a = processes.worker(service_id, lanes=1, name="crash-a", **WORKER_ENV)
    wait_for(lambda: job_progress(runtime, job.job_id)[1].sent >= 3 * FETCH, timeout=60, what="progress")
    a.signal(signal.SIGKILL)
    a.wait(10)
    killed_at = job_progress(runtime, job.job_id)[1]
    assert killed_at.sent < N, "the job finished before the kill; slow the emulator down"
    processes.worker(service_id, lanes=1, name="crash-b", **WORKER_ENV)
    wait_for(lambda: job_progress(runtime, job.job_id)[0].state == "done", timeout=120, what="job done")
    _done, progress = job_progress(runtime, job.job_id)
    counts = deliveries_per_token(emulator, tokens)
    assert min(counts.values()) >= 1, "a device was missed"
    assert max(counts.values()) <= 2, "a device got more than one duplicate"
    duplicates = sum(c - 1 for c in counts.values())
    assert duplicates <= FETCH, f"{duplicates} duplicates: more than the one page in flight"
    assert progress.targeted == N and progress.sent == N  # checkpointed counts never double-count
    with runtime.sessions() as s:
        (task,) = jobs_sql.tasks(s, job.job_id)
    # The crash counted (the second claim had attempts 2) until the next checkpoint advanced, which
    # restarts the poison count (docs/FANOUT.md "Leasing"); tests/integration/test_fanout_outages.py covers the count.
    assert task.attempts == 1 and task.state == "done"


def test_sigterm_finishes_the_page_releases_the_lease_and_exits(
    runtime, service_id, emulator, topic_job_seeded, processes
):
    job, tokens = topic_job_seeded
    a = processes.worker(service_id, lanes=1, name="crash-a", **WORKER_ENV)
    wait_for(lambda: job_progress(runtime, job.job_id)[1].sent >= 2 * FETCH, timeout=60, what="progress")
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0, a.tail()
    with runtime.sessions() as s:
        (task,) = jobs_sql.tasks(s, job.job_id)
    assert task.state == "queued" and task.lease_owner is None  # released, claimable at once
    stopped_at = job_progress(runtime, job.job_id)[1]
    assert 0 < stopped_at.sent < N
    assert emulator.stats()["delivered"].get("fcm", 0) == stopped_at.sent  # nothing sent unrecorded
    processes.worker(service_id, lanes=1, name="crash-b", **WORKER_ENV)
    wait_for(lambda: job_progress(runtime, job.job_id)[0].state == "done", timeout=120, what="job done")
    counts = deliveries_per_token(emulator, tokens)
    assert set(counts.values()) == {1}, "graceful stop must neither lose nor duplicate"
    assert job_progress(runtime, job.job_id)[1].sent == N
