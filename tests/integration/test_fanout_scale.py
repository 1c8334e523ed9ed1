"""~70,000 subscribers over three slots, two real `notee worker` processes, the emulator: every
device receives exactly one push, and the job's counts say so."""

from __future__ import annotations

from notee.store import jobs_sql
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import job_progress, seed_topic, topic_job, topic_template
from tests.support.waiting import wait_for

N = 70_000


def test_seventy_thousand_subscribers_over_three_slots_get_exactly_one_push(runtime, service_id, emulator, processes):
    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "all", N)
    job = topic_job(runtime, service_id, key, "all", variables={"name": "everyone"})
    assert job.task_count == 3  # numbers 1..70,000 -> slots 0, 1, 2
    workers = [processes.worker(service_id, lanes=2, name=f"scale-{i}") for i in range(2)]
    wait_for(
        lambda: job_progress(runtime, job.job_id)[0].state in ("done", "failed"),
        timeout=400,
        interval=0.5,
        what="the 70,000-device job to finish",
    )
    exit_codes = [w.stop(timeout=30) for w in workers]
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done", done.error
    assert (progress.targeted, progress.sent, progress.failed, progress.pruned) == (N, N, 0, 0)
    assert emulator.stats()["delivered"]["fcm"] == N
    counts = deliveries_per_token(emulator, tokens)
    assert len(counts) == N and set(counts.values()) == {1}
    with runtime.sessions() as s:
        owners = {t.slot_from: t.state for t in jobs_sql.tasks(s, job.job_id)}
    assert owners == {0: "done", 1: "done", 2: "done"}
    assert exit_codes == [0, 0]  # SIGTERM: clean exit
