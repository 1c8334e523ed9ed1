"""Every engagement figure equals the raw rows after the repair, never counted twice (issue 36
Reliability, docs/ENGAGEMENT.md "Storage, and counting once"), on the real stores.

- A counter request Cassandra applied to the job's partition and not to its day's (or the other way
  round): played by a counter write that applies the increments of one partition for real, then
  raises the timeout Cassandra gives for a counter write of unknown outcome. A repair that gave the
  day, type and topic figures the job's difference left them short (the CI fault run: 77 + 23 of
  3,900); each is now a cell of the job's own, set to the rows on its own.
- A single send's lost counter write: kept and repaired as a job's.
- Two copies of a batch at once (a client's retry racing its first attempt): both read "not stored"
  before either wrote; each row's claims (read back after the write) let at most one of them count
  it, and a row neither counted is counted by the recount of the job the copy that saw it kept.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from cassandra import WriteTimeout, WriteType
from sqlalchemy import text

from notee.core import notification_id
from notee.core.clock import naive_utc
from notee.domain import services
from notee.store import receipt_recount_sql
from notee.store.cql import engagement_counts
from notee.store.cql.engagement import ReceiptRow, bucket_of
from notee.usecases import receipt_repair, receipts
from tests.support.fanout import finished_topic_job
from tests.support.registry import bearer, new_api_key

DEVICES = 30
SENDS = 300  # single sends of one day: ~2 per bucket
TTL_S = 86_400


def _events(source: str, event: str, devices: range, prefix: str = "exact") -> list[dict]:
    at = datetime.now(UTC).isoformat()
    return [
        {"notification_id": notification_id.make(source, f"{prefix}-{i}"), "event": event, "at": at} for i in devices
    ]


def _kept(runtime, service: str) -> list[str]:
    with runtime.sessions() as s:
        rows = s.execute(text("SELECT source FROM receipt_recount WHERE service = :s"), {"s": service})
        return sorted(rows.scalars())


def _figures(client, headers, by: str) -> dict[str, dict[str, int]]:
    """The API's figures per ``by`` (the default range: the last 30 days of the service's zone)."""
    r = client.get("/v1/stats", params={"by": by}, headers=headers)
    assert r.status_code == 200, r.text
    return {x["key"]: {e: x["counts"][e] for e in ("delivered", "opened")} for x in r.json()["items"]}


def _only(runtime, monkeypatch, statement_name: str | None) -> None:
    """Counter writes apply the increments of ``statement_name``'s table alone (None: none), then
    time out."""
    st = runtime.statements
    original = st.add_counters
    keep = getattr(st, statement_name) if statement_name else None

    def partly(increments):
        original([(s, v) for s, v in increments if s is keep])
        raise WriteTimeout("Operation timed out", write_type=WriteType.COUNTER)  # applied or not: unknown

    monkeypatch.setattr(st, "add_counters", partly)


@pytest.mark.parametrize(
    "applied",
    ["counter_add_engagement_job", "counter_add_engagement_day"],
    ids=["job-applied-day-lost", "day-applied-job-lost"],
)
def test_a_counter_request_applied_to_one_partition_only_is_repaired_in_every_figure(
    client, settings, runtime, tenant, monkeypatch, applied
):
    service, headers = tenant
    job_id = finished_topic_job(runtime, service, DEVICES, type_="exact", topic="t")
    source = notification_id.source_of_job(job_id)
    key = str(new_api_key(client, settings, service, "app", kind="client")["api_key"])
    batch = _events(source, "delivered", range(DEVICES)) + _events(source, "opened", range(DEVICES // 3))
    with monkeypatch.context() as outage:
        _only(runtime, outage, applied)
        r = client.post("/v1/receipts", json={"events": batch}, headers=bearer(key))
    assert r.status_code == 503, r.text
    assert _kept(runtime, service) == [source]
    r = client.post("/v1/receipts", json={"events": batch}, headers=bearer(key))  # the app's retry
    assert r.status_code == 200 and r.json()["duplicates"] == len(batch), r.text
    job_before = client.get(f"/v1/stats/jobs/{job_id}", headers=headers).json()["counts"]["delivered"]
    day_before = sum(x["delivered"] for x in _figures(client, headers, "day").values())
    assert {job_before, day_before} == {0, DEVICES}, "the case: one of the two partitions took the write"

    monkeypatch.setattr(receipt_repair, "QUIET", timedelta(0))  # the job's rows are old enough
    report = receipt_repair.repair_kept(runtime, service=service, wait_s=60)
    assert report["jobs_recounted"] == 1 and report["events_removed"] == report["figure_events_removed"] == 0, report
    assert report["events_added"] + report["figure_events_added"] == DEVICES + DEVICES // 3, report
    want = {"delivered": DEVICES, "opened": DEVICES // 3}
    stats = client.get(f"/v1/stats/jobs/{job_id}", headers=headers).json()["counts"]
    assert {e: stats[e] for e in want} == want
    assert _figures(client, headers, "type") == {"exact": want}
    assert _figures(client, headers, "topic") == {"exact t": want}
    assert list(_figures(client, headers, "day").values()) == [want]
    assert _kept(runtime, service) == []
    again = receipt_repair.repair_kept(runtime, service=service, wait_s=60)  # nothing kept: nothing added
    assert (again["events_added"], again["figure_events_added"]) == (0, 0), again
    assert _figures(client, headers, "type") == {"exact": want}


def test_a_single_sends_lost_counter_write_is_kept_and_repaired(client, settings, runtime, tenant, monkeypatch):
    service, headers = tenant
    with runtime.sessions() as s:
        zone = services.get_service(s, service).timezone
    send = notification_id.new_single_source()
    keys = receipts.scope_keys("otp", None, datetime.now(UTC), zone)
    runtime.statements.add_source(service, send, keys, (DEVICES, DEVICES), TTL_S)
    key = str(new_api_key(client, settings, service, "app", kind="client")["api_key"])
    batch = _events(send, "delivered", range(DEVICES))
    with monkeypatch.context() as outage:
        _only(runtime, outage, None)  # every increment lost
        r = client.post("/v1/receipts", json={"events": batch}, headers=bearer(key))
    assert r.status_code == 503, r.text
    assert _kept(runtime, service) == [send], "the single send was not kept before the 503"
    assert client.post("/v1/receipts", json={"events": batch}, headers=bearer(key)).json()["duplicates"] == DEVICES
    assert _figures(client, headers, "type") == {"otp": {"delivered": 0, "opened": 0}}

    monkeypatch.setattr(receipt_repair, "QUIET", timedelta(0))
    report = receipt_repair.repair_kept(runtime, service=service, wait_s=60)
    assert (report["jobs_recounted"], report["events_added"], report["figure_events_added"]) == (1, DEVICES, DEVICES)
    assert runtime.statements.held(service, send, keys, everywhere=True).own == {"delivered": DEVICES}
    assert _figures(client, headers, "type") == {"otp": {"delivered": DEVICES, "opened": 0}}
    assert list(_figures(client, headers, "day").values()) == [{"delivered": DEVICES, "opened": 0}]
    assert client.get(f"/v1/stats/jobs/{send}", headers=headers).json()["counts"]["delivered"] == DEVICES


def _rows(source: str, devices: list[str]) -> list[ReceiptRow]:
    now = naive_utc(datetime.now(UTC))
    return [ReceiptRow(source, d, "delivered", None, now, now) for d in devices]


@pytest.mark.parametrize("order", ["writes-then-reads", "one-after-the-other"])
def test_two_copies_of_a_batch_at_once_never_count_an_event_twice(runtime, settings, store_tenant, monkeypatch, order):
    """Both copies read their rows as not stored before either writes (the race). Each then writes
    with its claim and reads the claims back, in either order: no row is counted by both, the second
    copy's extra row is its own, and a row neither counted leaves its job kept: the recount then makes
    the counters the raw rows."""
    service = store_tenant
    job_id = finished_topic_job(runtime, service, DEVICES, type_="race", topic="t")
    source = notification_id.source_of_job(job_id)
    st = runtime.statements
    devices = [notification_id.device_part(f"race-{i}") for i in range(DEVICES)]
    first = _rows(source, devices)
    # the second copy carries one more row, in a partition the first copy writes too
    bucket = bucket_of(devices[0])
    extra = next(d for i in range(10_000) if bucket_of(d := notification_id.device_part(f"more-{i}")) == bucket)
    second = _rows(source, [*devices, extra])
    known_first, known_second = st.known_receipts(service, first), st.known_receipts(service, second)
    assert known_first == known_second == set()
    if order == "writes-then-reads":
        written_first = st.write_claimed(service, first, known_first, "copy-1", TTL_S)
        written_second = st.write_claimed(service, second, known_second, "copy-2", TTL_S)
        got_first = st.read_claims(service, first, written_first, "copy-1")
    else:
        written_first = st.write_claimed(service, first, known_first, "copy-1", TTL_S)
        got_first = st.read_claims(service, first, written_first, "copy-1")
        written_second = st.write_claimed(service, second, known_second, "copy-2", TTL_S)
    got_second = st.read_claims(service, second, written_second, "copy-2")
    assert st.raw_counts(service, source) == {"delivered": DEVICES + 1}
    for i in range(DEVICES):
        assert not (got_first.new[i] and got_second.new[i]), f"row {i} counted by both copies"
    assert got_second.new[DEVICES], "the second copy's own row is not counted"
    assert got_second.contested == {source}, "the copy that saw the other did not keep its job"
    if order == "one-after-the-other":
        assert got_first.new == [True] * DEVICES and got_first.contested == set()
    # what the copies count, then the recount of the kept job: the counters are the raw rows
    keys = receipts.scope_keys("race", "t", datetime.now(UTC), "Asia/Seoul")
    for got in (got_first, got_second):
        if sum(got.new):
            st.count(service, {(source, keys, "delivered"): sum(got.new)})
    assert st.job_counts(service, source).get("delivered", 0) <= DEVICES + 1
    receipt_recount_sql.record(runtime.sessions, service, [source])
    monkeypatch.setattr(receipt_repair, "QUIET", timedelta(0))
    assert receipt_repair.repair_kept(runtime, service=service, wait_s=60)["jobs_recounted"] == 1
    assert st.job_counts(service, source) == {"delivered": DEVICES + 1}


def test_a_copy_that_read_before_the_other_wrote_counts_nothing_and_keeps_its_job(
    runtime, settings, store_tenant, monkeypatch
):
    """The use case end to end: one copy stored and counted; the other had read "not stored" before
    that: it writes the rows again, reads the first copy's claims, counts none of them (each answered
    a duplicate) and keeps the job, whose recount then finds nothing to add."""
    service = store_tenant
    job_id = finished_topic_job(runtime, service, DEVICES, type_="race", topic="t")
    source = notification_id.source_of_job(job_id)
    at = datetime.now(UTC)
    events = [receipts.ReceiptEvent(notification_id.make(source, f"copy-{i}"), "opened", at) for i in range(DEVICES)]
    done = receipts.post_receipts(runtime, settings, receipts.Caches(), service, events)
    assert (done.accepted, done.duplicates) == (DEVICES, 0)
    assert _kept(runtime, service) == []
    with monkeypatch.context() as raced:
        raced.setattr(runtime.statements, "known_receipts", lambda *a: set())  # its read came first
        late = receipts.post_receipts(runtime, settings, receipts.Caches(), service, events)
    assert (late.accepted, late.duplicates) == (0, DEVICES)
    assert runtime.statements.job_counts(service, source) == {"opened": DEVICES}
    assert _kept(runtime, service) == [source]
    monkeypatch.setattr(receipt_repair, "QUIET", timedelta(0))
    report = receipt_repair.repair_kept(runtime, service=service, wait_s=60)
    assert (report["jobs_recounted"], report["events_added"], report["events_removed"]) == (1, 0, 0), report
    assert runtime.statements.job_counts(service, source) == {"opened": DEVICES}


def test_the_day_cells_of_a_pruned_month_go_with_its_scope_partitions(runtime, store_tenant):
    """Counters take no TTL: `notee prune` deletes a month's day partitions (every day of it)."""
    service = store_tenant
    st = runtime.statements
    job = notification_id.source_of_job(str(uuid.uuid4()))
    old = receipts.scope_keys("old", None, datetime(2000, 1, 31, 12, tzinfo=UTC), "UTC")
    st.count(service, {(job, old, "opened"): 2})
    assert st.day_counts(service, ["2000-01-31"]) == {("2000-01-31", "old", ""): {"opened": 2}}
    assert st.forget_months(["2000-01"], [service]) == 1 + 4  # its day's one bucket, and its four scope partitions
    assert st.day_counts(service, ["2000-01-31"]) == {}


def test_many_single_sends_spread_over_the_day_buckets_and_the_figures_stay_exact(client, settings, runtime, tenant):
    """A day's cells are split over DAY_BUCKETS partitions by a hash of the source (docs/ENGAGEMENT.md
    "Bounds"): the sends' own cells land in many buckets, each bucket's shared figure cell holds
    exactly its own sends' events, and the figures (every bucket summed) equal the events posted."""
    service, headers = tenant
    with runtime.sessions() as s:
        zone = services.get_service(s, service).timezone
    st = runtime.statements
    keys = receipts.scope_keys("otp", None, datetime.now(UTC), zone)
    sends = [notification_id.new_single_source() for _ in range(SENDS)]
    for send in sends:
        st.add_source(service, send, keys, (1, 1), TTL_S)
    job_id = finished_topic_job(runtime, service, DEVICES, type_="otp", topic="t")
    job = notification_id.source_of_job(job_id)
    key = str(new_api_key(client, settings, service, "app", kind="client")["api_key"])
    at = datetime.now(UTC).isoformat()
    batch = [{"notification_id": notification_id.make(s, "phone"), "event": "delivered", "at": at} for s in sends]
    batch += [{"notification_id": notification_id.make(s, "phone"), "event": "opened", "at": at} for s in sends[::3]]
    batch += _events(job, "delivered", range(DEVICES))
    for i in range(0, len(batch), 100):
        r = client.post("/v1/receipts", json={"events": batch[i : i + 100]}, headers=bearer(key))
        assert r.status_code == 200 and r.json()["accepted"] == len(batch[i : i + 100]), r.text

    opened = set(sends[::3])
    by_bucket: dict[int, dict[str, int]] = {}
    for send in sends:
        want = {"delivered": 1} | ({"opened": 1} if send in opened else {})
        assert st.held(service, send, keys, everywhere=True).own == want, send
        mine = by_bucket.setdefault(engagement_counts.day_bucket(send), {})
        for event, n in want.items():
            mine[event] = mine.get(event, 0) + n
    assert len(by_bucket) >= 32, "the sends did not spread over the buckets"
    for bucket, want in by_bucket.items():  # each bucket's shared figure cell: its own sends' events only
        shared = (service, keys.day, bucket, engagement_counts.FIGURES, "otp", "", engagement_counts.SHARED)
        assert {e: n for e, n in st.session.execute(st.engagement_day_cell, shared)} == want, bucket
    total = {"delivered": SENDS + DEVICES, "opened": len(opened)}
    assert _figures(client, headers, "type") == {"otp": total}
    assert list(_figures(client, headers, "day").values()) == [total]
    assert _figures(client, headers, "topic") == {"otp t": {"delivered": DEVICES, "opened": 0}}
