"""The fan-out job store on the real MariaDB (and the real numbering counter in Cassandra):
atomic job creation, idempotency, SKIP LOCKED claims, lease fencing, checkpoints, roll-up, prune."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

from notee.core.errors import InvalidInput, NotFound
from notee.core.vocabulary import PageCounts, Progress, TopicTarget
from notee.store import jobs_sql, task_ends, task_leases
from notee.store.task_leases import LeaseLost
from notee.usecases import jobs, planning, publish
from notee.usecases.job_requests import JobRequest, TopicPublish
from notee.usecases.retention import prune_jobs
from tests.support.fanout import count_rows, topic_job, topic_template


def _claim(runtime, service, lease_s=30.0):
    return task_leases.claim(runtime.sessions, owner="test", lease_s=lease_s, services=[service])


def _expire(runtime, job_id):
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE job_id = :j"),
            {"j": job_id},
        )


def test_job_and_one_task_per_slot_created_together(runtime, service_id):
    key = topic_template(runtime, service_id)
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", 65_000)  # numbers reach slot 2
    job = topic_job(runtime, service_id, key, "sports", variables={"name": "Kim"})
    assert job.created and job.state == "queued" and job.task_count == 3
    assert job.payload["title"] == "Hi Kim" and job.target == {"topic": "sports"}
    with runtime.sessions() as s:
        tasks = jobs_sql.tasks(s, job.job_id)
    assert [(t.slot_from, t.slot_to, t.state) for t in tasks] == [(0, 0, "queued"), (1, 1, "queued"), (2, 2, "queued")]


def test_idempotency_key_returns_the_same_job(runtime, service_id):
    key = topic_template(runtime, service_id)
    first = topic_job(runtime, service_id, key, "t", idempotency_key="abc")
    again = topic_job(runtime, service_id, key, "t", idempotency_key="abc")
    other = topic_job(runtime, service_id, key, "t", idempotency_key="xyz")
    assert again.job_id == first.job_id and not again.created
    assert other.job_id != first.job_id
    assert count_rows(runtime, service_id) == (2, 2)


@pytest.mark.parametrize("round_", range(3))
def test_idempotency_race_creates_one_job(runtime, service_id, round_):
    key = topic_template(runtime, service_id)
    barrier, results, errors = threading.Barrier(4), [], []

    def go():
        barrier.wait()
        try:
            results.append(topic_job(runtime, service_id, key, "t", idempotency_key="race").job_id)
        except Exception as exc:  # reported below; a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 4 and len(set(results)) == 1
    assert count_rows(runtime, service_id) == (1, 1)


def test_bad_input_writes_nothing(runtime, service_id):
    key = topic_template(runtime, service_id)
    with pytest.raises(InvalidInput):
        topic_job(runtime, service_id, key, "t", variables={})  # title needs {{name}}
    with pytest.raises(NotFound):
        topic_job(runtime, service_id, "00000000-0000-0000-0000-000000000000", "t")
    with pytest.raises(InvalidInput):
        topic_job(runtime, service_id, key, "t", type_="other")
    assert count_rows(runtime, service_id) == (0, 0)


def test_task_insert_failure_rolls_back_the_job(runtime, service_id, monkeypatch):
    key = topic_template(runtime, service_id)
    monkeypatch.setattr(planning, "slot_ranges", lambda top, per: [(0, 0), (1, 0)])  # 2nd violates ck_task_slots
    with pytest.raises(OperationalError, match="ck_task_slots"):  # MariaDB's CHECK failure (4025)
        topic_job(runtime, service_id, key, "t")
    assert count_rows(runtime, service_id) == (0, 0)


def test_joins_the_callers_transaction(runtime, service_id):
    key = topic_template(runtime, service_id)
    with runtime.sessions() as session:
        session.begin()
        publish.create_job(
            runtime,
            session,
            JobRequest(
                service=service_id,
                notification_key=key,
                method="TOPIC",
                type_="news",
                target=TopicTarget("t"),
                idempotency_key=None,
                variables={"name": "a"},
            ),
        )
        session.rollback()  # the caller decides: nothing was committed
    assert count_rows(runtime, service_id) == (0, 0)


def test_a_topic_publish_reads_its_template_once(runtime, service_id):
    """publish_topic finds the TOPIC template by its type and hands the row to create_job: one SELECT
    of notification_template per publish, not a second one by key."""
    topic_template(runtime, service_id)
    template_reads: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT") and "notification_template" in statement:
            template_reads.append(statement)

    event.listen(runtime.engine, "before_cursor_execute", count)
    try:
        with runtime.sessions() as session:
            asked = TopicPublish(service=service_id, type_="news", topic="t", variables={"name": "a"})
            job = publish.publish_topic(runtime, session, asked)
            session.rollback()
    finally:
        event.remove(runtime.engine, "before_cursor_execute", count)
    assert job.created
    assert len(template_reads) == 1, template_reads


def test_concurrent_claims_hand_each_task_to_one_worker(runtime, service_id):
    key = topic_template(runtime, service_id)
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", 30_000 * 7)
    job = topic_job(runtime, service_id, key, "t")
    assert job.task_count == 8
    claimed, lock = [], threading.Lock()

    def worker():
        while (c := _claim(runtime, service_id)) is not None:
            with lock:
                claimed.append(c.task_no)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == list(range(8))
    with runtime.sessions() as s:
        assert jobs_sql.get_job(s, job.job_id).state == "running"


def test_expired_lease_is_reclaimed_and_the_stale_owner_is_fenced_off(runtime, service_id):
    key = topic_template(runtime, service_id)
    job = topic_job(runtime, service_id, key, "t")
    first = _claim(runtime, service_id)
    assert _claim(runtime, service_id) is None  # leased
    task_leases.checkpoint(
        runtime.sessions,
        first,
        current_slot=0,
        paging_state=b"\x01page1",
        counts=PageCounts(10, 9, 0, 1, 2),
        lease_s=30,
    )
    _expire(runtime, job.job_id)
    second = _claim(runtime, service_id)
    assert second.task_no == first.task_no and second.attempts == 2
    assert second.paging_state == b"\x01page1"  # resumes from the checkpoint
    for stale_write in (
        lambda: task_leases.checkpoint(
            runtime.sessions, first, current_slot=0, paging_state=b"x", counts=PageCounts(1), lease_s=30
        ),
        lambda: task_leases.extend_lease(runtime.sessions, first, lease_s=30),
        lambda: task_leases.release(runtime.sessions, first),
        lambda: task_leases.complete(runtime.sessions, first),
    ):
        with pytest.raises(LeaseLost):
            stale_write()
    task_leases.complete(runtime.sessions, second, counts=PageCounts(5, 5))
    with runtime.sessions() as s:
        job_now, progress = jobs.job_status(s, service_id, job.job_id)
    assert job_now.state == "done" and job_now.finished_at is not None and job_now.started_at is not None
    assert progress == Progress(tasks_done=1, targeted=15, sent=14, failed=0, pruned=1, retried=2)


def test_release_makes_the_task_claimable_again_with_its_progress(runtime, service_id):
    key = topic_template(runtime, service_id)
    topic_job(runtime, service_id, key, "t")
    c = _claim(runtime, service_id)
    task_leases.checkpoint(runtime.sessions, c, current_slot=0, paging_state=b"ps", counts=PageCounts(3, 3), lease_s=30)
    task_leases.release(runtime.sessions, c)
    again = _claim(runtime, service_id)
    assert again.paging_state == b"ps" and again.attempts == 1  # a graceful release gives its claim back


def test_job_fails_when_a_task_fails_and_finishes_when_all_tasks_do(runtime, service_id):
    key = topic_template(runtime, service_id)
    runtime.statements.allocate_numbers(service_id, "TOPIC", "news", 30_000)
    job = topic_job(runtime, service_id, key, "t")
    a, b = _claim(runtime, service_id), _claim(runtime, service_id)
    task_leases.complete(runtime.sessions, a, failed=True, error="provider configuration: bad key")
    with runtime.sessions() as s:
        assert jobs_sql.get_job(s, job.job_id).state == "running"  # b still open
    task_leases.complete(runtime.sessions, b)
    with runtime.sessions() as s:
        done = jobs_sql.get_job(s, job.job_id)
    assert done.state == "failed" and "bad key" in done.error


def test_poison_task_is_failed_after_max_attempts(runtime, service_id):
    key = topic_template(runtime, service_id)
    job = topic_job(runtime, service_id, key, "t")
    with runtime.sessions.begin() as s:
        s.execute(
            text("UPDATE fanout_task SET attempts = :n WHERE job_id = :j"),
            {"n": task_leases.MAX_TASK_ATTEMPTS, "j": job.job_id},
        )
    assert _claim(runtime, service_id) is None
    with runtime.sessions() as s:
        assert jobs_sql.get_job(s, job.job_id).state == "failed"


def test_reclaim_expired(runtime, service_id):
    key = topic_template(runtime, service_id)
    job = topic_job(runtime, service_id, key, "t")
    _claim(runtime, service_id)
    _expire(runtime, job.job_id)
    with runtime.sessions.begin() as s:
        assert task_ends.reclaim_expired(s) >= 1
        assert jobs_sql.tasks(s, job.job_id)[0].state == "queued"


def test_prune_deletes_only_finished_jobs_past_retention(runtime, service_id):
    key = topic_template(runtime, service_id)
    old, recent, open_ = (topic_job(runtime, service_id, key, "t") for _ in range(3))
    with runtime.sessions.begin() as s:
        s.execute(
            text(
                "UPDATE fanout_job SET state = 'done', finished_at = UTC_TIMESTAMP(6) - INTERVAL 20 DAY"
                " WHERE job_id = :j"
            ),
            {"j": old.job_id},
        )
        s.execute(
            text(
                "UPDATE fanout_job SET state = 'done', finished_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY"
                " WHERE job_id = :j"
            ),
            {"j": recent.job_id},
        )
        s.execute(
            text("UPDATE fanout_job SET created_at = UTC_TIMESTAMP(6) - INTERVAL 60 DAY WHERE job_id = :j"),
            {"j": open_.job_id},
        )
    assert prune_jobs(runtime, older_than_days=14) >= 1
    with runtime.sessions() as s:
        assert jobs_sql.get_job(s, old.job_id) is None
        assert jobs_sql.tasks(s, old.job_id) == []  # cascaded
        assert jobs_sql.get_job(s, recent.job_id) is not None and jobs_sql.get_job(s, open_.job_id) is not None
