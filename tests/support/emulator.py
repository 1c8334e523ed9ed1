"""The emulator for tests: fixtures, and the one way to count deliveries per token.

``emulator_process`` (session: one emulator per test process, so xdist workers never share one)
starts ``notee emulator`` on a free port with a fresh test CA and exports SSL_CERT_FILE /
REQUESTS_CA_BUNDLE / NO_PROXY / NOTEE_EMULATOR_URL / NOTEE_EMULATOR_CA_FILE (before any client is
built); ``emulator`` (per test) resets its state and hands back the control client; ``emu_runtime``
is a Runtime whose senders reach it; ``emu_app`` points the in-process API app's sender at it.
Registered as a plugin by tests/conftest.py: request the fixture, do not import it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from notee.core.settings import Settings
from notee.emulator.control import EmulatorControl as Emulator
from notee.emulator.control import local_emulator
from notee.providers.routing import ProviderSet
from notee.store.runtime import Runtime
from notee.usecases.sender import DeliverySender
from tests.support.waiting import wait_for

__all__ = [
    "Census",
    "Emulator",
    "app_sending_to",
    "census",
    "deliveries_per_token",
    "emu_app",
    "emu_runtime",
    "emulator",
    "emulator_process",
]


@pytest.fixture(scope="session")
def emulator_process() -> Iterator[Emulator]:
    """A realistic emulator (``notee emulator --realistic``): OAuth access tokens, quotas, per-device
    rates, APNs stream limits and GOAWAY. A test that needs otherwise switches a behaviour off
    through ``emulator.realistic(...)``; ``reset()`` restores the realistic defaults."""
    with local_emulator(realistic=True) as emu:
        saved = {k: os.environ.get(k) for k in emu.env()}
        os.environ.update(emu.env())
        yield emu
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture()
def emulator(emulator_process: Emulator) -> Emulator:
    emulator_process.reset()
    return emulator_process


@pytest.fixture(scope="module")
def emu_runtime(emulator_process: Emulator, migrated: None) -> Iterator[Runtime]:
    """A Runtime whose settings route to the emulator (made after it exported its URL and CA), for
    in-process workers: one per test module."""
    rt = Runtime(Settings())
    yield rt
    rt.close()


@contextmanager
def app_sending_to(
    client: TestClient, settings: Settings, emulator: Emulator, *, apns_port: bool = False
) -> Iterator[Emulator]:
    """The in-process API app (``client``) sends to the emulator until the block ends: FCM and APNs
    at its URL, or APNs at its own realistic APNs port with ``apns_port``."""
    routed = {"emulator_url": emulator.url, "emulator_ca_file": emulator.ca_file}
    if apns_port:
        routed["emulator_apns_url"] = emulator.apns_url
    sender = DeliverySender(client.app.state.runtime)  # type: ignore[attr-defined]
    sender.providers = ProviderSet(settings.model_copy(update=routed))
    app_sender, client.app.state.sender = client.app.state.sender, sender  # type: ignore[attr-defined]
    try:
        yield emulator
    finally:
        client.app.state.sender = app_sender  # type: ignore[attr-defined]  # the app's own, back after the block
        client.portal.call(sender.close)  # type: ignore[union-attr]


@pytest.fixture()
def emu_app(client: TestClient, settings: Settings, emulator: Emulator) -> Iterator[Emulator]:
    """The API app (``client``) with its sender pointed at the emulator: the emulator."""
    with app_sending_to(client, settings, emulator) as emu:
        yield emu


def deliveries_per_token(emu: Emulator, tokens: list[str], api: str | None = None) -> dict[str, int]:
    """Deliveries per token as the emulator counted them: through ``api`` ("fcm" or "apns"), or
    through both when None. Faulted attempts are not deliveries (see ``census`` for attempts)."""
    seen = emu.deliveries_of(tokens)
    apis = (api,) if api else ("fcm", "apns")
    return {t: sum(seen[t][a] for a in apis) for t in tokens}


@dataclass(frozen=True)
class Census:
    """What the emulator saw for a set of tokens."""

    targeted: int
    delivered: int  # tokens delivered at least once
    duplicated: int  # tokens delivered more than once
    extra_deliveries: int  # deliveries beyond the first, summed
    missing: list[str]
    max_attempts: int  # most requests any one token got (faulted ones included)
    attempts: dict[str, int]


def census(emu: Emulator, tokens: list[str]) -> Census:
    seen = emu.deliveries_of(tokens)
    counts = {t: seen[t]["fcm"] + seen[t]["apns"] for t in tokens}
    attempts = {t: seen[t]["attempts"] for t in tokens}
    return Census(
        targeted=len(tokens),
        delivered=sum(1 for c in counts.values() if c >= 1),
        duplicated=sum(1 for c in counts.values() if c > 1),
        extra_deliveries=sum(c - 1 for c in counts.values() if c > 1),
        missing=[t for t, c in counts.items() if c == 0],
        max_attempts=max(attempts.values(), default=0),
        attempts=attempts,
    )


def within_one_window(minute_s: float, need_s: float = 10.0) -> None:
    """Wait until the emulator's rate window has ``need_s`` left. Its windows are fixed and aligned to
    the clock (``EmulatorState.over_limit``: ``now // minute_s``), so a test counting requests against
    a limit must not start just before a window ends: the rest would be counted in a fresh window."""
    wait_for(
        lambda: minute_s - time.time() % minute_s >= need_s,
        timeout=need_s + 1,
        interval=0.05,
        what=f"a {minute_s} s rate window with {need_s} s left",
    )
