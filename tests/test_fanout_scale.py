"""~70,000 subscribers over three slots, two real `notee worker` processes, the emulator: every
device receives exactly one push, and the job's counts say so."""

from __future__ import annotations

from tests.emulator_fixture import emulator, emulator_process  # noqa: F401
from tests.fanout_helpers import (job_progress, per_token_counts, seed_topic, start_worker, topic_job,
                                  topic_template, wait_for)
from notee.store import job_queue as store

N = 70_000


def test_seventy_thousand_subscribers_over_three_slots_get_exactly_one_push(runtime, service_id, emulator, tmp_path):
    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "all", N)
    job = topic_job(runtime, service_id, key, "all", variables={"name": "everyone"})
    assert job.task_count == 3  # numbers 1..70,000 -> slots 0, 1, 2
    workers = [start_worker(service_id, tmp_path / f"w{i}.log", lanes=2) for i in range(2)]
    try:
        wait_for(lambda: job_progress(runtime, job.job_id)[0].state in ("done", "failed"), timeout=400,
                 interval=0.5, what="the 70,000-device job to finish")
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done", done.error
    assert (progress.targeted, progress.sent, progress.failed, progress.pruned) == (N, N, 0, 0)
    assert emulator.stats()["delivered"]["fcm"] == N
    counts = per_token_counts(emulator, tokens)
    assert len(counts) == N and set(counts.values()) == {1}
    with runtime.sessions() as s:
        owners = {t.slot_from: t.state for t in store.tasks(s, job.job_id)}
    assert owners == {0: "done", 1: "done", 2: "done"}
    assert all(w.returncode == 0 for w in workers)  # SIGTERM: clean exit
