"""The worker's per-push shortcuts (docs/BENCHMARKS.md, round 3, fourth part) give what the general
path gives: the routing of a page of one platform, the notification id's device part."""

from __future__ import annotations

import base64
import hashlib

import pytest

from notee.core import notification_id
from notee.providers.base import Message
from notee.providers.routing import ServiceProviders, choose


class _P:
    def __init__(self, name: str) -> None:
        self.name = name


def _general(routes: ServiceProviders, messages: list[Message]) -> tuple[dict[str, list[int]], list[int]]:
    by_kind = {"apns": routes.apns, "fcm": routes.fcm, "web": routes.web}
    groups: dict[str, list[int]] = {}
    unroutable: list[int] = []
    for i, m in enumerate(messages):
        kind = choose(
            m.device_os,
            has_apns=routes.apns is not None,
            has_fcm=routes.fcm is not None,
            has_web=routes.web is not None,
        )
        if kind is None or by_kind[kind] is None:
            unroutable.append(i)
        else:
            groups.setdefault(by_kind[kind].name, []).append(i)  # type: ignore[union-attr]
    return groups, unroutable


@pytest.mark.parametrize("fcm", [True, False])
@pytest.mark.parametrize("apns", [True, False])
@pytest.mark.parametrize("web", [True, False])
@pytest.mark.parametrize("platforms", [["AOS"], ["IOS"], ["WEB"], ["AOS", "IOS"], ["IOS", "WEB", "AOS"], []])
def test_a_page_is_split_as_message_by_message_routing_would(
    fcm: bool, apns: bool, web: bool, platforms: list[str]
) -> None:
    routes = ServiceProviders(
        fcm=_P("fcm") if fcm else None,  # type: ignore[arg-type]
        apns=_P("apns") if apns else None,  # type: ignore[arg-type]
        web=_P("web") if web else None,  # type: ignore[arg-type]
    )
    messages = [Message(f"t{i}", platforms[i % len(platforms)], "T", "B") for i in range(7)] if platforms else []
    groups, unroutable = routes.split(messages)
    assert ({p.name: idx for p, idx in groups}, unroutable) == _general(routes, messages)


def test_the_device_part_is_unpadded_base64url_of_the_first_8_bytes_of_blake2b() -> None:
    tokens = ["", "a", "token-1", "é" * 40, "\udcff surrogate", "+/+/" * 50, *(f"tok{i}" for i in range(2_000))]
    for token in tokens:
        digest = hashlib.blake2b(token.encode("utf-8", "surrogateescape"), digest_size=8).digest()
        expected = base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")
        assert notification_id.device_part(token) == expected
        assert len(expected) == notification_id.DEVICE_CHARS
