"""The API's HTTP/1.1 protocol (notee/api/http1.py): httptools with Notee's bound on the request head,
and a response written in one piece. The limits of the edge itself are in tests/integration/test_api_edge.py.

Here, the rules that need no server; tests/integration/test_api_http1.py has the rest."""

from __future__ import annotations

import asyncio

from notee.api.http1 import LARGE_WRITE, CoalescingTransport


class _Recorder(asyncio.Transport):
    """Records what reaches the socket layer."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def test_writes_of_one_loop_step_leave_as_one_write_in_order():
    async def scenario() -> tuple[list[bytes], list[bytes], bool]:
        real = _Recorder()
        transport = CoalescingTransport(real, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b'{"a":1}')
        assert real.writes == []  # held until the step ends
        await asyncio.sleep(0)
        first = list(real.writes)
        real.writes.clear()
        transport.write(b"head")
        transport.write(b"x" * LARGE_WRITE)  # a large write goes out at once, after what was held
        transport.write(b"last")
        transport.close()  # what was written before close() still goes out
        return first, real.writes, real.closed

    first, second, closed = asyncio.run(scenario())
    assert first == [b'HTTP/1.1 200 OK\r\n\r\n{"a":1}']
    assert second == [b"head", b"x" * LARGE_WRITE, b"last"] and closed
