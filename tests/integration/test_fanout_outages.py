"""A passing outage never fails a job (issue 14, items 1-2), at unit level on the real stores:

- the outage backoff doubles up to its cap and resets;
- the circuit breaker opens on a mostly-unreachable page, refuses while open, probes, closes;
- a task's attempt counter counts crashes and unexpected errors at one checkpoint, not graceful
  releases; a checkpoint restarts the count;
- a worker whose sends hit a store outage more often than the poison limit still finishes the job,
  every device once; an unexpected error repeated at one checkpoint fails the task loudly;
- a paging state Cassandra rejects resumes the slot after the checkpointed key: nothing lost,
  nothing twice;
- transport errors in a fan-out: a refused provider opens the circuit (nothing is dead-lettered)
  and the job completes once the provider is back (without a breaker, tests/integration/test_providers_delivery.py
  ::test_an_unreachable_provider_is_not_the_devices_failure).
The long versions (60 s quorum loss, MariaDB killed 30 s, provider refusing 60 s) are in tests/faults/.
The rules of this topic that need no server are in tests/unit/test_fanout_outages.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from notee.core.errors import ProviderUnavailable
from notee.core.settings import Settings
from notee.core.vocabulary import FcmCredentials, PageCounts, ProviderCredentials, Recipient
from notee.providers.base import Message
from notee.providers.breaker import CircuitBreaker
from notee.store import jobs_sql, task_leases
from notee.store.cql.recipients import stream_recipients
from notee.store.runtime import Runtime
from notee.store.task_leases import MAX_TASK_ATTEMPTS
from notee.worker.lanes import Worker, WorkerOptions
from notee.worker.outage import OutageBackoff
from notee.worker.task import SendPage
from tests.support.emulator import deliveries_per_token
from tests.support.fanout import job_progress, seed_topic, topic_job, topic_template
from tests.support.registry import shared_service_account
from tests.support.tcp_switch import TcpSwitch
from tests.support.waiting import until


def _claim(runtime: Runtime, service: str) -> task_leases.Claim | None:
    return task_leases.claim(runtime.sessions, owner="t", lease_s=30, services=[service])


def test_graceful_releases_never_count_crashes_and_errors_do(runtime: Runtime, service_id: str) -> None:
    key = topic_template(runtime, service_id)
    job = topic_job(runtime, service_id, key, "a")
    for _ in range(MAX_TASK_ATTEMPTS * 2):  # twice the poison limit of outages: still claimable
        c = _claim(runtime, service_id)
        assert c is not None and c.attempts == 1
        task_leases.release(runtime.sessions, c, delay_s=0, error="OperationalError: MySQL gone")
    c = _claim(runtime, service_id)
    assert c is not None
    task_leases.checkpoint(
        runtime.sessions,
        c,
        current_slot=0,
        paging_state=b"p",
        counts=PageCounts(5, 5),
        lease_s=30,
        resume_key=(5, "tok5"),
    )
    for n in range(1, MAX_TASK_ATTEMPTS):  # unexpected errors at one checkpoint count...
        task_leases.release(runtime.sessions, c, error=f"ValueError: bad row {n}", counts_as_attempt=True)
        c = _claim(runtime, service_id)
        assert c is not None and c.attempts == n + 1 and c.resume_key == (5, "tok5")
    task_leases.checkpoint(runtime.sessions, c, current_slot=0, paging_state=b"q", counts=PageCounts(5, 5), lease_s=30)
    task_leases.release(runtime.sessions, c, error="ValueError: again", counts_as_attempt=True)
    c = _claim(runtime, service_id)  # ...until the checkpoint advances: the count restarts
    assert c is not None and c.attempts == 2
    with runtime.sessions.begin() as s:  # a crash: the claim is never given back, the lease runs out
        s.execute(
            text("UPDATE fanout_task SET lease_until = UTC_TIMESTAMP(6), attempts = :n WHERE job_id = :j"),
            {"n": MAX_TASK_ATTEMPTS, "j": job.job_id},
        )
    assert _claim(runtime, service_id) is None
    failed, progress = job_progress(runtime, job.job_id)
    assert failed.state == "failed" and "ValueError: again" in (failed.error or "")
    assert progress.sent == 10  # the progress stays, for a requeue


class Recorder:
    """A SendPage that records what it sent and raises ``errors`` (one per call) before sending."""

    def __init__(self, errors: list[BaseException] | None = None) -> None:
        self.errors = list(errors or [])
        self.sent: Counter[str] = Counter()
        self.calls = 0

    async def __call__(self, service: str, job_id: str, messages: list[Message], dry_run: bool = False) -> PageCounts:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        self.sent.update(m.device_token for m in messages)
        return PageCounts(targeted=len(messages), sent=len(messages))


def _run(
    runtime: Runtime,
    service: str,
    send_page: SendPage,
    *,
    fetch_size: int = 100,
    timeout: float = 60,
    backoff: OutageBackoff | None = None,
    cleanup: Callable[[], Awaitable[None]] | None = None,
) -> Worker:
    """Run a one-lane worker until the service has no open task (released tasks wait out their
    backoff, so "no task claimable right now" is not "done")."""

    async def go() -> Worker:
        worker = Worker(runtime, send_page, WorkerOptions(lanes=1, services=[service], fetch_size=fetch_size))
        worker.backoff = backoff or OutageBackoff(base_s=0.01, cap_s=0.05)
        run = asyncio.create_task(worker.run())
        try:
            while True:
                with runtime.sessions() as s:
                    open_ = s.execute(
                        text(
                            "SELECT COUNT(*) FROM fanout_task t JOIN fanout_job j USING (job_id)"
                            " WHERE j.service = :s AND t.state IN ('queued', 'running')"
                        ),
                        {"s": service},
                    ).scalar()
                if not open_:
                    return worker
                await asyncio.sleep(0.05)
        finally:
            worker.stop.set()
            await run
            if cleanup is not None:
                await cleanup()

    return asyncio.run(asyncio.wait_for(go(), timeout))


def test_store_outages_beyond_the_poison_limit_delay_the_job_but_never_fail_it(
    runtime: Runtime, service_id: str
) -> None:
    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "o", 450)
    job = topic_job(runtime, service_id, key, "o")
    outage = [sa_exc.OperationalError("INSERT", {}, Exception("2013 Lost connection")) for _ in range(8)]
    outage += [ProviderUnavailable("fcm: circuit open", retry_in=0.01) for _ in range(8)]
    from cassandra import Unavailable

    outage.insert(3, Unavailable("Cannot achieve consistency level QUORUM"))
    sender = Recorder(outage)
    worker = _run(runtime, service_id, sender)
    done, progress = job_progress(runtime, job.job_id)
    assert len(outage) + 1 > MAX_TASK_ATTEMPTS  # more outages than the poison limit
    assert done.state == "done" and progress.sent == 450, (done.error, progress)
    assert sorted(sender.sent) == sorted(tokens) and set(sender.sent.values()) == {1}  # an outage before a send
    assert worker.releases["outage"] == 17 and worker.releases["error"] == 0
    with runtime.sessions() as s:
        (task,) = jobs_sql.tasks(s, job.job_id)
    assert task.attempts <= 1


def test_an_unexpected_error_repeated_at_one_checkpoint_fails_the_task_loudly(
    runtime: Runtime, service_id: str
) -> None:
    key = topic_template(runtime, service_id)
    seed_topic(runtime, service_id, "news", key, "p", 250)
    job = topic_job(runtime, service_id, key, "p")

    class PoisonAfterFirstPage(Recorder):
        async def __call__(
            self, service: str, job_id: str, messages: list[Message], dry_run: bool = False
        ) -> PageCounts:
            if self.calls >= 1:
                self.calls += 1
                raise ValueError("cannot render this page")
            return await super().__call__(service, job_id, messages, dry_run)

    sender = PoisonAfterFirstPage()
    worker = _run(runtime, service_id, sender)
    failed, progress = job_progress(runtime, job.job_id)
    assert failed.state == "failed" and "cannot render this page" in (failed.error or "")
    assert f"gave up after {MAX_TASK_ATTEMPTS}" in (failed.error or "")
    assert progress.sent == 100  # the first page, checkpointed before the poison page
    assert worker.releases["error"] == MAX_TASK_ATTEMPTS  # the first claim's page passed, then 10 failures


def test_a_rejected_paging_state_resumes_after_the_checkpointed_key(runtime: Runtime, service_id: str) -> None:
    key = topic_template(runtime, service_id)
    seed_topic(runtime, service_id, "news", key, "k", 250)
    job = topic_job(runtime, service_id, key, "k")
    from notee.core.vocabulary import TopicTarget

    st = runtime.statements
    rows = [Recipient._make(r) for page, _ in stream_recipients(st, key, TopicTarget("k"), 0, 1000) for r in page]
    assert len(rows) == 250
    c = _claim(runtime, service_id)
    assert c is not None
    # As if the first 100 rows were sent and checkpointed with a paging state the server now refuses
    # (e.g. written by another Cassandra version).
    task_leases.checkpoint(
        runtime.sessions,
        c,
        current_slot=0,
        paging_state=b"\x00not a paging state",
        counts=PageCounts(100, 100),
        lease_s=30,
        resume_key=(rows[99].no, rows[99].device_token),
    )
    task_leases.release(runtime.sessions, c)
    sender = Recorder()
    # Its own Runtime: the driver closes the connection that carried the protocol error.
    rt = Runtime(runtime.settings)
    try:
        worker = _run(rt, service_id, sender)
    finally:
        rt.close()
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done" and progress.sent == 250
    assert worker.releases["paging_state"] == 1
    assert set(sender.sent) == {r.device_token for r in rows[100:]} and set(sender.sent.values()) == {1}


CREDS = ProviderCredentials(fcm=FcmCredentials(shared_service_account()))  # the emulator accepts any bearer


def _messages(tokens: list[str]) -> list[Message]:
    return [Message(t, "AOS", "t", "b") for t in tokens]


def test_a_refused_provider_opens_the_circuit_and_dead_letters_nothing(
    runtime: Runtime, service_id: str, emulator
) -> None:
    from notee.providers.routing import ProviderSet
    from notee.usecases.deliver import DeliveryOptions, deliver
    from tests.support.registry import make_service

    make_service(runtime, service_id)
    host, port = emulator.url.removeprefix("https://").split(":")
    settings = runtime.settings.model_copy(update={"emulator_url": emulator.url, "emulator_ca_file": emulator.ca_file})

    async def go(switch: TcpSwitch) -> tuple[object, object, int]:
        providers = ProviderSet(settings.model_copy(update={"emulator_url": f"https://localhost:{switch.port}"}))
        breaker = CircuitBreaker(open_s=0.2, max_open_s=0.5)
        guarded = DeliveryOptions(credentials=CREDS, breaker=breaker)
        try:
            # One send while the provider is up: the OAuth access token is fetched and cached, as in a
            # worker that was sending when the provider went away.
            warm = await deliver(runtime, providers, service_id, _messages(["r0"]), guarded)
            assert warm.delivered == 1
            switch.off()
            with pytest.raises(ProviderUnavailable) as opened:
                await deliver(
                    runtime,
                    providers,
                    service_id,
                    _messages(["r1", "r2", "r3"]),
                    DeliveryOptions(credentials=CREDS, job_id="j", breaker=breaker),
                )
            with pytest.raises(ProviderUnavailable) as refused:  # open: refused without sending
                await deliver(runtime, providers, service_id, _messages(["r4"]), guarded)
            await until(lambda: breaker.probing("fcm"), timeout=10, what="the breaker due for a probe")
            with pytest.raises(ProviderUnavailable):  # the probe fails too: open again
                await deliver(runtime, providers, service_id, _messages(["r5", "r6"]), guarded)
            switch.on()
            await until(lambda: breaker.probing("fcm"), timeout=10, what="the breaker due for a probe again")
            result = await deliver(runtime, providers, service_id, _messages(["r7", "r8", "r9"]), guarded)
            return opened.value, refused.value, result.delivered
        finally:
            await providers.close()

    with TcpSwitch(host if host != "localhost" else "127.0.0.1", int(port)) as switch:
        opened, refused, delivered = asyncio.run(go(switch))
    assert "unreachable" in str(opened) and refused.retry_in > 0
    assert delivered == 3  # the probe r7, then the rest
    assert [emulator.deliveries(t)["fcm"] for t in ("r1", "r4", "r5", "r7", "r8", "r9")] == [0, 0, 0, 1, 1, 1]
    with runtime.sessions() as s:
        assert s.execute(text("SELECT COUNT(*) FROM dead_letter WHERE service = :s"), {"s": service_id}).scalar() == 0


def test_a_fan_out_rides_out_a_provider_refusing_connections(runtime: Runtime, service_id: str, emulator) -> None:
    """A short version of the fault test: the emulator's port refuses connections for 3 s after the
    first pages; the job completes, no device is dead-lettered, duplicates stay within one page."""
    from notee.usecases.sender import DeliverySender

    key = topic_template(runtime, service_id)
    tokens = seed_topic(runtime, service_id, "news", key, "b", 1_000)
    job = topic_job(runtime, service_id, key, "b")
    _host, port = emulator.url.removeprefix("https://").split(":")
    with TcpSwitch("127.0.0.1", int(port)) as switch:
        settings = Settings(
            emulator_url=f"https://localhost:{switch.port}",
            emulator_ca_file=emulator.ca_file,
            fanout_breaker_max_open_s=1.0,
            fanout_outage_backoff_cap_s=1.0,
        )
        rt = Runtime(settings)
        holder: list[DeliverySender] = []
        pages = 0

        async def send(service: str, job_id: str, messages: list[Message], dry_run: bool) -> PageCounts:
            nonlocal pages
            if not holder:  # built inside the worker's event loop
                holder.append(DeliverySender(rt))
            pages += 1
            if pages == 3:  # mid-publish: the provider goes away for 3 s
                switch.off()
                threading.Timer(3.0, switch.on).start()
            return await holder[0](service, job_id, messages, dry_run)

        try:
            _run(
                rt,
                service_id,
                send,
                backoff=OutageBackoff(base_s=0.1, cap_s=1.0),
                timeout=120,
                cleanup=lambda: holder[0].close(),
            )
        finally:
            rt.close()
        sender = holder[0]
    done, progress = job_progress(runtime, job.job_id)
    counts = deliveries_per_token(emulator, tokens)
    assert done.state == "done" and progress.failed == 0 and sender.breaker.opened >= 1
    assert min(counts.values()) == 1  # every device reached
    assert sum(1 for c in counts.values() if c > 1) <= 100  # at most the page in flight, once
    with runtime.sessions() as s:
        assert s.execute(text("SELECT COUNT(*) FROM dead_letter WHERE job_id = :j"), {"j": job.job_id}).scalar() == 0
