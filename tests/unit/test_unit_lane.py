"""The unit lane's guard (tests/unit/conftest.py) really fails a test that reaches for the network,
sleeps, or asks for a store or a Notee process: each way is tried here and must raise."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from tests.unit.conftest import NotAUnitTest


def test_a_socket_connect_raises():
    with socket.socket() as sock, pytest.raises(NotAUnitTest, match=r"socket\.connect"):
        sock.connect(("127.0.0.1", 3306))  # MariaDB's port: refused before any packet leaves
    with pytest.raises(NotAUnitTest):
        socket.create_connection(("127.0.0.1", 9042), timeout=1)  # Cassandra's


def test_an_asyncio_connection_raises():
    async def connect() -> None:
        await asyncio.open_connection("127.0.0.1", 8443)

    with pytest.raises(NotAUnitTest):
        asyncio.run(connect())


def test_a_sleep_raises():
    with pytest.raises(NotAUnitTest, match=r"time\.sleep"):
        time.sleep(0.01)


@pytest.mark.parametrize("fixture", ["runtime", "client", "emulator", "processes", "migrated"])
def test_the_fixtures_of_the_stores_and_processes_are_refused(request, fixture):
    with pytest.raises(NotAUnitTest, match=fixture):
        request.getfixturevalue(fixture)
