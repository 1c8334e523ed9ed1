"""A fan-out page holding APNs and FCM devices when FCM's circuit breaker opens mid-page (docs/FANOUT.md
"Outages"): the APNs devices it delivered stay delivered, only the FCM devices wait, inside the page,
for the breaker to let them through (after ``provider_wait_s`` the page is handed back with the APNs
devices named done, never dead-lettered). Before, the
breaker's ``ProviderUnavailable`` handed the whole page back and the worker sent it again: the APNs
devices got the push twice. FCM goes through a TCP switch the test turns off; APNs reaches the
emulator directly."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from notee.core.errors import ProviderUnavailable
from notee.core.vocabulary import ApnsCredentials, FcmCredentials, ProviderCredentials
from notee.providers.base import Message
from notee.providers.breaker import CircuitBreaker
from notee.providers.routing import ProviderSet
from notee.store.runtime import Runtime
from notee.usecases.deliver import DeliveryOptions, DeliveryResult, deliver
from notee.usecases.delivery_result import HandedBack
from tests.support.registry import apns_credentials, make_service, random_token, shared_service_account
from tests.support.tcp_switch import TcpSwitch
from tests.support.waiting import until

CREDS = ProviderCredentials(fcm=FcmCredentials(shared_service_account()), apns=ApnsCredentials(**apns_credentials()))


def _page(prefix: str) -> list[Message]:
    """APNs devices first: their group is sent before FCM's in each round (routes keep page order)."""
    return [Message(random_token(f"{prefix}i"), "IOS", "t", "b") for _ in range(3)] + [
        Message(random_token(f"{prefix}a"), "AOS", "t", "b") for _ in range(4)
    ]


async def _as_the_worker_sends(
    runtime: Runtime, providers: ProviderSet, service: str, page: list[Message], options: DeliveryOptions
) -> tuple[DeliveryResult, int]:
    """Deliver ``page`` as a fan-out lane does: a page handed back (``ProviderUnavailable``) is sent
    again whole once the breaker lets a probe through. Returns the last result and the hand-backs."""
    breaker = options.breaker
    assert breaker is not None
    handed_back = 0
    while True:
        try:
            return await deliver(runtime, providers, service, page, options), handed_back
        except ProviderUnavailable:
            handed_back += 1
            await until(lambda: breaker.blocked_for("fcm") == 0, timeout=30, what="the FCM breaker due for a probe")


def _run(runtime: Runtime, service_id: str, emulator, scenario) -> object:
    make_service(runtime, service_id)
    host, port = emulator.url.removeprefix("https://").split(":")
    with TcpSwitch(host if host != "localhost" else "127.0.0.1", int(port)) as switch:
        settings = runtime.settings.model_copy(
            update={
                "emulator_url": f"https://localhost:{switch.port}",  # FCM: through the switch
                "emulator_apns_url": emulator.url,  # APNs: straight to the emulator
                "emulator_ca_file": emulator.ca_file,
            }
        )

        async def go() -> object:
            providers = ProviderSet(settings)
            try:
                return await scenario(providers, switch)
            finally:
                await providers.close()

        return asyncio.run(go())


async def _warm(runtime: Runtime, providers: ProviderSet, service: str) -> None:
    """One send while FCM is up: its OAuth access token is fetched and cached, as in a worker that was
    sending when FCM went away."""
    warm = [Message(random_token("w"), "AOS", "t", "b")]
    assert (await deliver(runtime, providers, service, warm, DeliveryOptions(credentials=CREDS))).delivered == 1


def _dead_letters(runtime: Runtime, service: str) -> int:
    with runtime.sessions() as s:
        return int(s.execute(text("SELECT COUNT(*) FROM dead_letter WHERE service = :s"), {"s": service}).scalar())


def test_a_mixed_page_keeps_its_apns_devices_delivered_when_fcms_breaker_opens_mid_page(
    runtime: Runtime, service_id: str, emulator
) -> None:
    page = _page("m")
    breaker = CircuitBreaker(open_s=0.2, max_open_s=0.5)
    options = DeliveryOptions(credentials=CREDS, job_id="j", breaker=breaker, provider_wait_s=60)

    async def scenario(providers: ProviderSet, switch: TcpSwitch) -> tuple[DeliveryResult, int]:
        await _warm(runtime, providers, service_id)
        switch.off()

        async def back_once_open() -> None:  # FCM returns once its breaker has opened on this page
            await until(lambda: breaker.opened >= 1, timeout=30, what="the FCM breaker to open")
            switch.on()

        back = asyncio.ensure_future(back_once_open())
        try:
            return await _as_the_worker_sends(runtime, providers, service_id, page, options)
        finally:
            await back

    result, handed_back = _run(runtime, service_id, emulator, scenario)
    assert breaker.opened >= 1
    counts = {m.device_token: emulator.deliveries(m.device_token) for m in page}
    # Without holding: the page was handed back after its APNs group was sent, and sent again whole.
    assert [counts[m.device_token]["apns"] for m in page[:3]] == [1, 1, 1], (handed_back, counts)
    assert [counts[m.device_token]["fcm"] for m in page[3:]] == [1, 1, 1, 1], (handed_back, counts)
    assert handed_back == 0 and result.delivered == 7 and result.failed == []
    assert _dead_letters(runtime, service_id) == 0


def test_held_devices_that_outwait_provider_wait_hand_the_page_back_with_the_others_done(
    runtime: Runtime, service_id: str, emulator
) -> None:
    page = _page("d")
    breaker = CircuitBreaker(open_s=0.2, max_open_s=0.5)
    options = DeliveryOptions(credentials=CREDS, job_id="j", breaker=breaker, provider_wait_s=1.0)

    async def scenario(providers: ProviderSet, switch: TcpSwitch) -> HandedBack:
        await _warm(runtime, providers, service_id)
        switch.off()  # for good: FCM never comes back within the page's wait
        try:
            await deliver(runtime, providers, service_id, page, options)
        except HandedBack as exc:
            return exc
        raise AssertionError("the page was not handed back")

    handed = _run(runtime, service_id, emulator, scenario)
    # The APNs devices are done and named, so the page's next claim skips them (the worker keeps them
    # with the release: tests/integration/test_provider_outage_hold.py); the FCM devices wait for FCM.
    assert handed.partial.delivered == 3 and handed.partial.failed == [] and handed.processed == 3
    assert handed.done == {m.device_token for m in page[:3]}
    assert "circuit open: fcm" in handed.message and handed.waited_s >= 1.0
    assert [emulator.deliveries(m.device_token)["apns"] for m in page[:3]] == [1, 1, 1]
    assert [emulator.deliveries(m.device_token)["fcm"] for m in page[3:]] == [0, 0, 0, 0]
    assert _dead_letters(runtime, service_id) == 0  # before: the four FCM devices were dead-lettered


def test_a_page_that_meets_an_open_breaker_before_any_answer_is_handed_back_unsent(
    runtime: Runtime, service_id: str, emulator
) -> None:
    page = _page("o")
    breaker = CircuitBreaker(open_s=30, max_open_s=30)
    breaker.record("fcm", sent=1, unreachable=1)  # FCM's breaker is open before the page starts
    options = DeliveryOptions(credentials=CREDS, job_id="j", breaker=breaker, provider_wait_s=60)

    async def scenario(providers: ProviderSet, switch: TcpSwitch) -> ProviderUnavailable:
        try:
            await deliver(runtime, providers, service_id, page, options)
        except ProviderUnavailable as exc:
            return exc
        raise AssertionError("the page was not handed back")

    refused = _run(runtime, service_id, emulator, scenario)
    assert refused.retry_in > 0
    # Nothing sent: the page comes back whole later, no device of it twice, the lane free meanwhile.
    assert [emulator.deliveries(m.device_token)["apns"] for m in page[:3]] == [0, 0, 0]
    assert _dead_letters(runtime, service_id) == 0
