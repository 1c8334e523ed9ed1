"""A provider outage longer than ``NOTEE_FANOUT_PROVIDER_WAIT_S`` delays a fan-out page, never fails it
(docs/FANOUT.md "Outages"), with a real worker, real stores and the emulator behind a TCP switch:

- a mixed page whose FCM devices outwait the page's wait is handed back with its APNs devices done
  (kept in ``fanout_page_done``); each claim after that sends only the FCM devices, and once FCM is back
  every device has the push exactly once, the job's counts are exact and nothing is dead-lettered
  (before: the FCM devices were dead-lettered after the wait);
- a page handed back whole while APNs is down records its ``no_credentials`` dead letters once (before:
  once per hand-back);
- FCM refusing for its own reasons (503 with Retry-After) longer than the page's wait: the page is
  handed back and sent later, each device once, nothing dead-lettered (before: charged, dead-lettered);
- a held push whose ``ttl_seconds`` passed while its provider was away is counted in ``ttl_expired``,
  not sent and not dead-lettered.
The wait, the breaker and the backoff are shortened through the settings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import text

from notee.core.settings import Settings
from notee.core.vocabulary import PageCounts
from notee.domain.credentials import credentials_box, set_apns_credentials
from notee.providers.base import Message
from notee.store.runtime import Runtime
from notee.usecases.sender import DeliverySender
from notee.worker.lanes import Worker, WorkerOptions
from notee.worker.outage import OutageBackoff
from tests.support.fanout import job_progress, seed_topic, topic_job
from tests.support.registry import apns_credentials, make_service, make_template
from tests.support.tcp_switch import TcpSwitch
from tests.support.waiting import until


@dataclass
class Outage:
    """Which provider goes through the switch, and when it comes back: ``back(worker, sender)`` is
    polled while the job runs; once True the switch is turned on. ``stop_first``: the worker is
    stopped then (SIGTERM's path) and a second one finishes the job."""

    provider: str  # "fcm" or "apns" through the switch; "none": both straight to the emulator
    back: Callable[[Worker, DeliverySender], bool]
    stop_first: bool = False
    page_wait_s: float = 0.3  # NOTEE_FANOUT_PROVIDER_WAIT_S: outwaited at once


def _service(runtime: Runtime, service: str, *, fcm: bool) -> str:
    """A service with APNs credentials (and FCM's when ``fcm``) and a TOPIC template; its key."""
    make_service(runtime, service, fcm=fcm)
    with runtime.sessions.begin() as s:
        set_apns_credentials(s, credentials_box(runtime.settings), service, **apns_credentials())
    return make_template(runtime, service, "TOPIC", "news", title="Hi")


def _run(runtime: Runtime, service: str, emulator, outage: Outage, *, timeout: float = 90) -> DeliverySender:
    """A one-lane worker with a ``DeliverySender`` whose ``outage.provider`` reaches the emulator
    through a switch that is off from the job's first page until ``outage.back`` says so. Returns the
    sender once the service has no open task."""
    host, port = emulator.url.removeprefix("https://").split(":")
    with TcpSwitch(host if host != "localhost" else "127.0.0.1", int(port)) as switch:
        through = f"https://localhost:{switch.port}"
        settings = Settings(
            emulator_url=through if outage.provider == "fcm" else emulator.url,
            emulator_apns_url=through if outage.provider == "apns" else emulator.url,
            emulator_ca_file=emulator.ca_file,
            fanout_provider_wait_s=outage.page_wait_s,
            fanout_breaker_max_open_s=0.3,
        )
        rt = Runtime(settings)
        holder: list[DeliverySender] = []  # each worker's sender, as a worker process builds it (its stop event)

        def worker() -> Worker:
            own: list[DeliverySender] = []

            async def send(service: str, job_id: str, messages: list[Message], dry_run: bool) -> PageCounts:
                if not own:  # built inside the worker's event loop
                    own.append(DeliverySender(rt, w.stop))
                    if not holder:  # FCM's OAuth token fetched while it is up, then the outage starts
                        await own[0].send_page(service, "warm", [Message("warm-token", "AOS", "t", "b")], False)
                        switch.off()
                    holder.append(own[0])
                return await own[0].send_page(service, job_id, messages, dry_run)

            w = Worker(rt, send, WorkerOptions(lanes=1, services=[service], fetch_size=100))
            w.backoff = OutageBackoff(base_s=0.05, cap_s=0.2)
            return w

        async def go() -> None:
            first = worker()
            run = asyncio.create_task(first.run())
            try:
                await until(lambda: bool(holder) and outage.back(first, holder[0]), timeout=timeout, what="outage")
                if outage.stop_first:
                    first.stop.set()
                    await run
                    first = worker()
                    run = asyncio.create_task(first.run())
                switch.on()
                await until(lambda: _open_tasks(runtime, service) == 0, timeout=timeout, what="the job to end")
            finally:
                first.stop.set()
                await run
                for sender in holder:
                    await sender.close()

        try:
            asyncio.run(go())
        finally:
            rt.close()
        return holder[0]


def _open_tasks(runtime: Runtime, service: str) -> int:
    with runtime.sessions() as s:
        return int(
            s.execute(
                text(
                    "SELECT COUNT(*) FROM fanout_task t JOIN fanout_job j USING (job_id)"
                    " WHERE j.service = :s AND t.state IN ('queued', 'running')"
                ),
                {"s": service},
            ).scalar()
        )


def _count(runtime: Runtime, sql: str, job_id: str) -> int:
    with runtime.sessions() as s:
        return int(s.execute(text(sql), {"j": job_id}).scalar())


def _dead_letters(runtime: Runtime, job_id: str) -> int:
    return _count(runtime, "SELECT COUNT(*) FROM dead_letter WHERE job_id = :j", job_id)


def test_an_fcm_outage_longer_than_the_page_wait_delays_its_devices_and_dead_letters_nothing(
    runtime: Runtime, service_id: str, emulator
) -> None:
    key = _service(runtime, service_id, fcm=True)
    ios = seed_topic(runtime, service_id, "news", key, "m", 30, os="IOS", prefix=f"{service_id}-i-")
    aos = seed_topic(runtime, service_id, "news", key, "m", 30, os="AOS", prefix=f"{service_id}-a-")
    job = topic_job(runtime, service_id, key, "m")
    holds: list[int] = []

    def back(worker: Worker, sender: DeliverySender) -> bool:
        # FCM comes back once the page was handed back three times, each past the page's own wait
        holds.append(_count(runtime, "SELECT COUNT(*) FROM fanout_page_done WHERE job_id = :j", job.job_id))
        return worker.releases["outage"] >= 3 or _open_tasks(runtime, service_id) == 0

    sender = _run(runtime, service_id, emulator, Outage("fcm", back))
    assert sender.breaker.opened >= 1
    apns = [emulator.deliveries(t)["apns"] for t in ios]
    fcm = [emulator.deliveries(t)["fcm"] for t in aos]
    # Before: the FCM devices were dead-lettered after the page's wait (fcm == [0] * 30).
    assert apns == [1] * 30 and fcm == [1] * 30, (apns, fcm)
    assert max(holds) == 30  # the APNs devices were kept done while FCM was away
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done", done.error
    assert (progress.targeted, progress.sent, progress.failed, progress.pruned, progress.ttl_expired) == (
        60,
        60,
        0,
        0,
        0,
    )
    assert _dead_letters(runtime, job.job_id) == 0
    assert _count(runtime, "SELECT COUNT(*) FROM fanout_page_hold WHERE job_id = :j", job.job_id) == 0  # gone with it
    assert _count(runtime, "SELECT COUNT(*) FROM fanout_page_done WHERE job_id = :j", job.job_id) == 0


def test_a_page_handed_back_whole_records_its_no_credentials_dead_letters_once(
    runtime: Runtime, service_id: str, emulator
) -> None:
    key = _service(runtime, service_id, fcm=False)  # APNs only: the Android devices have no route
    ios = seed_topic(runtime, service_id, "news", key, "n", 5, os="IOS", prefix=f"{service_id}-i-")
    seed_topic(runtime, service_id, "news", key, "n", 3, os="AOS", prefix=f"{service_id}-a-")
    job = topic_job(runtime, service_id, key, "n")

    def back(worker: Worker, sender: DeliverySender) -> bool:
        return worker.releases["outage"] >= 3  # APNs unreachable: the page went back whole three times

    _run(runtime, service_id, emulator, Outage("apns", back))
    assert [emulator.deliveries(t)["apns"] for t in ios] == [1] * 5
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done", done.error
    assert (progress.targeted, progress.sent, progress.failed, progress.no_credentials) == (8, 5, 3, 3)
    # Before: the three letters were written again at every hand-back (12 after three of them).
    assert _dead_letters(runtime, job.job_id) == 3


def test_a_held_push_past_its_ttl_is_counted_expired_not_sent_and_not_dead_lettered(
    runtime: Runtime, service_id: str, emulator
) -> None:
    key = _service(runtime, service_id, fcm=True)
    ios = seed_topic(runtime, service_id, "news", key, "t", 4, os="IOS", prefix=f"{service_id}-i-")
    aos = seed_topic(runtime, service_id, "news", key, "t", 6, os="AOS", prefix=f"{service_id}-a-")
    job = topic_job(runtime, service_id, key, "t", overrides={"ttl_seconds": 1})

    def back(worker: Worker, sender: DeliverySender) -> bool:
        held = _count(
            runtime,
            "SELECT COUNT(*) FROM fanout_page_hold WHERE job_id = :j AND held_since < UTC_TIMESTAMP(6) - INTERVAL 2 SECOND",
            job.job_id,
        )
        # FCM returns only after the held pushes' TTL (1 s) has passed (or the job ended without it)
        return held == 1 or _open_tasks(runtime, service_id) == 0

    _run(runtime, service_id, emulator, Outage("fcm", back))
    assert [emulator.deliveries(t)["apns"] for t in ios] == [1] * 4
    assert [emulator.deliveries(t)["fcm"] for t in aos] == [0] * 6  # worthless now: never pushed late
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done", done.error
    assert (progress.targeted, progress.sent, progress.failed, progress.ttl_expired) == (4, 4, 0, 6)
    assert _dead_letters(runtime, job.job_id) == 0


def test_a_worker_stopped_while_a_page_waits_for_fcm_hands_it_back_and_nothing_is_pushed_twice(
    runtime: Runtime, service_id: str, emulator
) -> None:
    """The page's wait (60 s) ends on stop: the first worker hands the page back with its APNs devices
    done and exits; a second worker, FCM back, sends only the FCM devices."""
    key = _service(runtime, service_id, fcm=True)
    ios = seed_topic(runtime, service_id, "news", key, "s", 20, os="IOS", prefix=f"{service_id}-i-")
    aos = seed_topic(runtime, service_id, "news", key, "s", 20, os="AOS", prefix=f"{service_id}-a-")
    job = topic_job(runtime, service_id, key, "s")

    def back(worker: Worker, sender: DeliverySender) -> bool:
        return sender.breaker.opened >= 1 or _open_tasks(runtime, service_id) == 0  # the page waits inside

    _run(runtime, service_id, emulator, Outage("fcm", back, stop_first=True, page_wait_s=60), timeout=30)
    apns = [emulator.deliveries(t)["apns"] for t in ios]
    fcm = [emulator.deliveries(t)["fcm"] for t in aos]
    # Before: the stopped page was released unrecorded and sent again whole (its APNs devices twice).
    assert apns == [1] * 20 and fcm == [1] * 20, (apns, fcm)
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done", done.error
    assert (progress.targeted, progress.sent, progress.failed) == (40, 40, 0)
    assert _dead_letters(runtime, job.job_id) == 0


def test_a_provider_refusing_longer_than_the_page_wait_delays_the_page_and_dead_letters_nothing(
    runtime: Runtime, service_id: str, emulator
) -> None:
    key = _service(runtime, service_id, fcm=True)
    aos = seed_topic(runtime, service_id, "news", key, "r", 5, os="AOS", prefix=f"{service_id}-a-")
    job = topic_job(runtime, service_id, key, "r")
    for token in aos:  # eight 503s each: past the page's wait (0.3 s) after the first Retry-After (1 s)
        emulator.fault("fcm", 503, match=token, times=8, retry_after=1)

    _run(runtime, service_id, emulator, Outage("none", lambda worker, sender: True))
    # Before: past the wait each refusal was charged to the device, dead-lettered at its fifth.
    assert [emulator.deliveries(t)["fcm"] for t in aos] == [1] * 5
    done, progress = job_progress(runtime, job.job_id)
    assert done.state == "done", done.error
    assert (progress.targeted, progress.sent, progress.failed) == (5, 5, 0)
    assert _dead_letters(runtime, job.job_id) == 0
