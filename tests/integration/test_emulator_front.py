"""The emulator's public port's front (notee/emulator/front.py): its own counters in GET /_emu/stats,
restarted by POST /_emu/reset, and HTTP/1.1 relayed to granian over a Unix socket of its own, so the
emulator listens on no TCP port but the ones it was given."""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from urllib.parse import urlsplit

import httpx


def test_the_fronts_own_counters_are_in_stats_and_restart_on_reset(emulator):
    ctx = ssl.create_default_context(cafile=emulator.ca_file)
    bearer = "Bearer " + emulator.access_token()
    before = emulator.stats()["front"]
    with httpx.Client(http2=True, verify=ctx, base_url=emulator.url, timeout=10) as h2:
        for i in range(3):
            body = {"message": {"token": f"front-{i}", "notification": {"title": "a"}}}
            r = h2.post("/v1/projects/demo/messages:send", json=body, headers={"authorization": bearer})
            assert r.status_code == 200 and r.http_version == "HTTP/2"
    with httpx.Client(verify=ctx, base_url=emulator.url, timeout=10) as h1:  # a new HTTP/1.1 connection
        after = h1.get("/_emu/stats").json()["front"]
    assert after["connections"] == before["connections"] + 1
    assert after["relayed"] == before["relayed"] + 1
    assert after["protocol_errors"] == 0 and after["max_open"] >= 1
    assert after["port"] == urlsplit(emulator.url).port and after["rules"]["max_streams"] == 100
    emulator.reset()
    reset = emulator.stats()["front"]
    assert (reset["connections"], reset["relayed"], reset["max_open"]) == (0, 0, 0)


def _listening_tcp_ports(pids: set[int]) -> set[int]:
    inodes: set[str] = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _tree(pid: int) -> set[int]:
    pids, todo = set(), [pid]
    while todo:
        p = todo.pop()
        pids.add(p)
        for task in Path(f"/proc/{p}/task").iterdir():
            todo += [int(c) for c in (task / "children").read_text().split()]
    return pids


def test_the_emulator_listens_on_no_tcp_port_but_its_own(emulator):
    """granian behind the front listens on a Unix socket: a loopback port picked free and released
    before granian bound it could be taken by another process in between."""
    assert emulator.pid and emulator.apns_url
    ports = _listening_tcp_ports(_tree(emulator.pid))
    assert ports == {urlsplit(emulator.url).port, urlsplit(emulator.apns_url).port}
