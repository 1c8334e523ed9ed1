"""Receipts whose counting failed are counted without an operator (issue 36 Reliability,
docs/ENGAGEMENT.md "Storage, and counting once"), on the real stores.

The fault run (tests/faults/test_receipts_node_loss.py) lost 5 % of the counts with a node: a counter
write failed (or timed out) after its rows landed, the batch answered 503, and its retry found the
rows and counted nothing. Here the counter write fails deterministically (the statement raises the
timeout Cassandra gives for a counter write of unknown outcome), and a batch that dies between its
rows and its counters is played by one that raises a BaseException no handler of the use case
catches. The job is kept in MySQL (``receipt_recount``) before the answer, and the scheduler's run
(``receipt_repair.repair_kept``) sets its counters, and its type's and day's, to its raw rows, once
the job is quiet: never while a batch may still be counting, never twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cassandra import WriteTimeout, WriteType
from sqlalchemy import text

from notee.core import notification_id
from notee.store import receipt_recount_sql
from notee.usecases import receipt_repair, receipts
from tests.support.fanout import finished_topic_job
from tests.support.registry import bearer, new_api_key
from tests.support.waiting import wait_for

DEVICES = 40


class ProcessDied(BaseException):
    """The API process killed between its rows and its counters: no handler of the use case runs."""


def _client_key(client, settings, service: str) -> str:
    return str(new_api_key(client, settings, service, "app", kind="client")["api_key"])


def _events(source: str, event: str, devices: range) -> list[dict]:
    at = datetime.now(UTC).isoformat()
    return [
        {"notification_id": notification_id.make(source, f"recount-{i}"), "event": event, "at": at} for i in devices
    ]


def _kept(runtime, service: str) -> list[str]:
    with runtime.sessions() as s:
        rows = s.execute(text("SELECT source FROM receipt_recount WHERE service = :s"), {"s": service})
        return list(rows.scalars())


def _lose_counter_writes(runtime, monkeypatch) -> None:
    def times_out(*args, **kwargs):
        raise WriteTimeout("Operation timed out", write_type=WriteType.COUNTER)  # applied or not: unknown

    monkeypatch.setattr(runtime.statements, "count", times_out)


@pytest.fixture()
def job(runtime, tenant):
    service, _ = tenant
    job_id = finished_topic_job(runtime, service, DEVICES, type_="recount", topic="t")
    return job_id, notification_id.source_of_job(job_id)


def _scope(runtime, service: str, scope: str) -> dict[tuple[str, str], int]:
    """(item, event) -> count of ``scope`` (day, type, topic) as the figures sum them (engagement_day),
    over the days around today (the service's zone may be ahead of UTC)."""
    days = [(datetime.now(UTC) + timedelta(days=d)).date().isoformat() for d in (-1, 0, 1)]
    out: dict[tuple[str, str], int] = {}
    for (day, type_, topic), events in runtime.statements.day_counts(service, days).items():
        item = {"day": day, "type": type_, "topic": f"{type_} {topic}" if topic else ""}[scope]
        for event, n in events.items():
            if item and n:
                out[(item, event)] = out.get((item, event), 0) + n
    return out


def test_a_counter_write_lost_with_its_503_is_counted_by_the_scheduled_recount(
    client, settings, runtime, tenant, job, monkeypatch
):
    service, headers = tenant
    job_id, source = job
    key = _client_key(client, settings, service)
    batch = _events(source, "delivered", range(DEVICES))
    with monkeypatch.context() as outage:
        _lose_counter_writes(runtime, outage)
        r = client.post("/v1/receipts", json={"events": batch}, headers=bearer(key))
    assert r.status_code == 503, r.text
    assert _kept(runtime, service) == [source], "the job was not kept before the 503"
    r = client.post("/v1/receipts", json={"events": batch}, headers=bearer(key))  # the app's retry
    assert r.status_code == 200 and (r.json()["accepted"], r.json()["duplicates"]) == (0, DEVICES), r.text
    assert runtime.statements.job_counts(service, source) == {}, "the retry counted: the lost write is not the case"

    monkeypatch.setattr(receipt_repair, "QUIET", timedelta(0))  # the job's rows are old enough
    report = receipt_repair.repair_kept(runtime, service=service, wait_s=60)
    assert (report["jobs_recounted"], report["events_added"], report["events_removed"]) == (1, DEVICES, 0), report
    assert runtime.statements.job_counts(service, source) == {"delivered": DEVICES}
    assert client.get(f"/v1/stats/jobs/{job_id}", headers=headers).json()["counts"]["delivered"] == DEVICES
    assert [n for (item, event), n in _scope(runtime, service, "type").items() if event == "delivered"] == [DEVICES]
    assert [n for (item, event), n in _scope(runtime, service, "day").items() if event == "delivered"] == [DEVICES]
    assert _kept(runtime, service) == []
    # run again: nothing kept, nothing added
    assert receipt_repair.repair_kept(runtime, service=service, wait_s=60)["events_added"] == 0
    assert runtime.statements.job_counts(service, source) == {"delivered": DEVICES}


def test_the_recount_waits_while_the_job_takes_receipts_and_never_counts_twice(
    client, settings, runtime, tenant, job, monkeypatch
):
    """A batch whose rows the recount reads may still be sending its counter writes: a job with a row
    newer than ``QUIET`` is left for a later run (its record stays); once quiet, a batch counted
    normally in between is not counted again."""
    service, _ = tenant
    _, source = job
    key = _client_key(client, settings, service)
    first = _events(source, "delivered", range(DEVICES // 2))
    with monkeypatch.context() as outage:
        _lose_counter_writes(runtime, outage)
        assert client.post("/v1/receipts", json={"events": first}, headers=bearer(key)).status_code == 503
    second = _events(source, "opened", range(DEVICES))
    r = client.post("/v1/receipts", json={"events": second}, headers=bearer(key))
    assert r.status_code == 200 and r.json()["accepted"] == DEVICES, r.text
    # the kept record is old enough to be taken, the job's newest row is not
    report = receipt_repair.repair_kept(runtime, now=datetime.now(UTC) + timedelta(hours=1), service=service, wait_s=60)
    assert (report["jobs_waiting"], report["jobs_recounted"]) == (1, 0), report
    assert runtime.statements.job_counts(service, source) == {"opened": DEVICES}
    assert _kept(runtime, service) == [source]

    monkeypatch.setattr(receipt_repair, "QUIET", timedelta(0))
    report = receipt_repair.repair_kept(runtime, service=service, wait_s=60)
    assert (report["jobs_recounted"], report["events_added"]) == (1, DEVICES // 2), report
    assert runtime.statements.job_counts(service, source) == {"delivered": DEVICES // 2, "opened": DEVICES}
    assert runtime.statements.raw_counts(service, source) == {"delivered": DEVICES // 2, "opened": DEVICES}


def test_a_batch_slow_to_count_keeps_its_job_before_it_goes_on_and_a_death_then_is_counted(
    runtime, settings, store_tenant, monkeypatch
):
    """The process-death window: a batch still unanswered after ``INTENT_AFTER_S`` keeps its job in
    MySQL first; the process then dies before its counter writes, and the recount counts its rows."""
    service = store_tenant
    job_id = finished_topic_job(runtime, service, DEVICES, type_="recount", topic="t")
    source = notification_id.source_of_job(job_id)

    def dies_before_counting(*args, **kwargs):
        wait_for(lambda: _kept(runtime, service), timeout=10, what="the slow batch's job kept")
        raise ProcessDied

    monkeypatch.setattr(runtime.statements, "count", dies_before_counting)
    at = datetime.now(UTC)
    events = [receipts.ReceiptEvent(notification_id.make(source, f"slow-{i}"), "delivered", at) for i in range(DEVICES)]
    with pytest.raises(ProcessDied):
        receipts.post_receipts(runtime, settings, receipts.Caches(), service, events)
    monkeypatch.undo()
    assert _kept(runtime, service) == [source]
    assert runtime.statements.job_counts(service, source) == {}
    monkeypatch.setattr(receipt_repair, "QUIET", timedelta(0))
    assert receipt_repair.repair_kept(runtime, service=service, wait_s=60)["events_added"] == DEVICES
    assert runtime.statements.job_counts(service, source) == {"delivered": DEVICES}


def test_a_healthy_batch_keeps_nothing_and_a_kept_job_gone_from_mysql_is_dropped(
    client, settings, runtime, tenant, job
):
    service, _ = tenant
    _, source = job
    key = _client_key(client, settings, service)
    r = client.post("/v1/receipts", json={"events": _events(source, "delivered", range(5))}, headers=bearer(key))
    assert r.status_code == 200 and r.json()["accepted"] == 5
    assert _kept(runtime, service) == []
    gone = notification_id.source_of_job("00000000-0000-4000-8000-000000000000")
    receipt_recount_sql.record(runtime.sessions, service, [gone])
    report = receipt_repair.repair_kept(runtime, now=datetime.now(UTC) + timedelta(hours=1), service=service, wait_s=60)
    assert report["jobs_gone"] == 1 and _kept(runtime, service) == [], report
