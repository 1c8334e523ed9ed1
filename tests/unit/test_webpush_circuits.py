"""The fan-out's circuit breaker guards each Web Push service on its own (issue 32): a push service
that cannot be reached opens its own breaker, its messages are held (not sent) while it is open, one
is sent as a probe when it is half-open, and the other push services of the same send go on. Pure:
a fake provider and a fake clock (the emulator's version: tests/integration/test_webpush_paths.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from notee.core import webpush_token
from notee.providers.base import Circuits, Delivered, Message, Outcome, RetryAfter
from notee.providers.breaker import GUARDED_LISTED, CircuitBreaker
from notee.providers.webpush import WebPushProvider
from notee.usecases.guarded_send import send_guarded

P256DH = "B" + "A" * 86  # shapes only: the fake provider never encrypts
AUTH = "A" * 22
MOZ, FCM_WEB = "https://updates.push.services.mozilla.com", "https://fcm.googleapis.com"


def _msg(origin: str, n: int) -> Message:
    return Message(f"{P256DH}.{AUTH}.{origin}/wpush/v2/sub{n}", "WEB", "t", "b")


class FakeWebPush:
    """Answers like the push services: ``down`` origins never answer (a transport failure)."""

    name = "webpush"

    def __init__(self, down: set[str]) -> None:
        self.down = down
        self.asked: list[list[str]] = []  # the origins of each send, in order

    def circuit(self, message: Message) -> str:
        return WebPushProvider.circuit(self, message)  # type: ignore[arg-type]  # the real rule, no state

    async def send(self, messages: Sequence[Message]) -> list[Outcome]:
        origins = [webpush_token.decode(m.device_token).origin for m in messages]
        self.asked.append(origins)
        return [RetryAfter("transport: refused", transport=True) if o in self.down else Delivered() for o in origins]

    async def close(self) -> None:
        return None


def _send(provider: FakeWebPush, messages: list[Message], breaker: CircuitBreaker) -> list[Outcome]:
    return asyncio.run(send_guarded(provider, messages, breaker))


def test_the_circuit_of_a_browser_is_its_push_services_origin() -> None:
    m = Message(f"{P256DH}.{AUTH}.https://host.example:8443/wp/fcm/abc", "WEB", "t", "b")
    assert WebPushProvider.circuit(None, m) == "webpush:https://host.example:8443"  # type: ignore[arg-type]
    assert webpush_token.decode(m.device_token).origin == "https://host.example:8443"
    assert isinstance(FakeWebPush(set()), Circuits)


def test_one_push_service_down_opens_its_own_breaker_and_the_others_go_on() -> None:
    now = [100.0]
    breaker = CircuitBreaker(open_s=2.0, clock=lambda: now[0])
    provider = FakeWebPush(down={MOZ})
    page = [_msg(MOZ, i) for i in range(3)] + [_msg(FCM_WEB, i) for i in range(3)]

    first = _send(provider, page, breaker)
    assert [type(o).__name__ for o in first[3:]] == ["Delivered"] * 3  # FCM web answered
    assert all(isinstance(o, RetryAfter) and o.circuit_open and o.seconds == 2.0 for o in first[:3]), first
    assert breaker.states() == {f"webpush:{FCM_WEB}": "closed", f"webpush:{MOZ}": "open"}

    # while it is open, autopush is not asked at all; FCM web is
    second = _send(provider, page, breaker)
    assert provider.asked[-1] == [FCM_WEB] * 3
    assert all(isinstance(o, RetryAfter) and o.circuit_open for o in second[:3])
    assert all(isinstance(o, Delivered) for o in second[3:])

    # half-open: one autopush message as the probe; it fails, so the breaker opens for twice as long
    now[0] += 2.0
    third = _send(provider, page, breaker)
    assert provider.asked[-1] == [MOZ, FCM_WEB, FCM_WEB, FCM_WEB]
    assert all(isinstance(o, RetryAfter) and o.circuit_open and o.seconds == 4.0 for o in third[:3]), third
    assert breaker.blocked_for(f"webpush:{MOZ}") == 4.0 and breaker.blocked_for(f"webpush:{FCM_WEB}") == 0

    # autopush back: the probe answers, the rest of its messages follow in the same send
    now[0] += 4.0
    provider.down.clear()
    fourth = _send(provider, page, breaker)
    assert provider.asked[-2:] == [[MOZ, FCM_WEB, FCM_WEB, FCM_WEB], [MOZ, MOZ]]
    assert all(isinstance(o, Delivered) for o in fourth)
    assert set(breaker.states().values()) == {"closed"}


def test_a_minority_unreachable_does_not_open_and_is_retried_as_transport() -> None:
    breaker = CircuitBreaker(open_s=2.0, clock=lambda: 0.0)
    provider = FakeWebPush(down=set())
    page = [_msg(MOZ, i) for i in range(4)]

    class OneLost(FakeWebPush):
        async def send(self, messages: Sequence[Message]) -> list[Outcome]:
            out = await super().send(messages)
            return [RetryAfter("transport: reset", transport=True), *out[1:]]

    outcomes = _send(OneLost(set()), page, breaker)
    assert isinstance(outcomes[0], RetryAfter) and outcomes[0].transport and not outcomes[0].circuit_open
    assert breaker.states() == {f"webpush:{MOZ}": "closed"}
    assert _send(provider, page, breaker) and provider.asked == [[MOZ] * 4]


def test_the_metrics_list_a_bounded_number_of_closed_push_services_and_every_open_one() -> None:
    breaker = CircuitBreaker(open_s=2.0, clock=lambda: 0.0)
    for n in range(GUARDED_LISTED + 10):
        breaker.record(f"webpush:https://push{n}.example", sent=1, unreachable=0)
    breaker.record("fcm", sent=1, unreachable=0)
    breaker.record("webpush:https://down.example", sent=1, unreachable=1)
    states = breaker.states()
    assert states["fcm"] == "closed" and states["webpush:https://down.example"] == "open"
    assert len(states) == GUARDED_LISTED + 2  # fcm is always listed; closed push services up to the cap
