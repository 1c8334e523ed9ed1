"""The unit lane (``make test-unit``): the pure rules, no servers, no sockets, no sleeps; the whole
lane runs in well under a minute on a 2-core machine.

While a unit test runs, every socket connect and ``time.sleep`` raises ``NotAUnitTest``, and the
fixtures of the stores, the emulator and the Notee processes refuse to start: a test that needs any
of them fails loudly here, and belongs in tests/integration/. tests/unit/test_unit_lane.py shows
that the guard does fail such a test.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import NoReturn

import pytest


class NotAUnitTest(AssertionError):
    """A unit test reached for a socket, a sleep or a server fixture."""


def _refuse(what: str):
    def refused(*args: object, **kwargs: object) -> NoReturn:
        raise NotAUnitTest(f"a unit test used {what}: it belongs in tests/integration/")

    return refused


@pytest.fixture(autouse=True)
def _no_sockets_no_sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _refuse("socket.connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse("socket.connect_ex"))
    monkeypatch.setattr(time, "sleep", _refuse("time.sleep"))
    yield


def _server_fixture(name: str):
    @pytest.fixture(name=name)
    def refused() -> NoReturn:
        raise NotAUnitTest(f"a unit test asked for the {name!r} fixture: it belongs in tests/integration/")

    return refused


# The fixtures of tests/support that reach a store, the emulator or a process, refused by name.
migrated = _server_fixture("migrated")
runtime = _server_fixture("runtime")
app = _server_fixture("app")
client = _server_fixture("client")
emulator_process = _server_fixture("emulator_process")
emulator = _server_fixture("emulator")
emu_runtime = _server_fixture("emu_runtime")
processes = _server_fixture("processes")
