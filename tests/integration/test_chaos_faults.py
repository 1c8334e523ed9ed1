"""The chaos run's fault injector (chaos/faults.py) against stand-in stores: store faults never
overlap in time, whatever the plan's margins assumed (the plan keeps them 60 s apart; a node's
restart under load took 3-4 minutes in the 2026-12-05 17:45 run, and a second node was killed while
the first was still starting: a quorum lost, the experiment the outage tests run on purpose).

Here rather than in tests/unit: the injector sleeps for each fault's length and runs in threads."""

from __future__ import annotations

import threading
from typing import Any

from chaos import faults
from chaos.plan import PlannedFault
from tests.support.waiting import wait_for


class _Cluster:
    """Records kills and restarts; a restart of ``held`` waits until ``release`` is set."""

    def __init__(self, held: str) -> None:
        self.held = held
        self.release = threading.Event()
        self.events: list[str] = []

    def kill(self, node: str) -> None:
        self.events.append(f"kill {node}")

    def restart(self, node: str) -> None:
        if node == self.held:
            self.release.wait(30)
        self.events.append(f"whole {node}")


class _Recorder:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def write(self, kind: str, **fields: Any) -> None:
        self.lines.append({"kind": kind, **fields})


def test_a_store_fault_waits_until_the_store_before_it_is_whole_again():
    cluster = _Cluster(held="3")
    rec = _Recorder()
    target = faults.Target({}, cluster, None, None, rec)  # type: ignore[arg-type]
    first = threading.Thread(target=faults.inject, args=(target, PlannedFault(0, "cassandra_node", "3", 0.01)))
    second = threading.Thread(target=faults.inject, args=(target, PlannedFault(0, "cassandra_node", "2", 0.01)))
    first.start()
    wait_for(lambda: cluster.events == ["kill 3"], timeout=10, what="node 3 killed")
    second.start()
    # node 3 is still starting: node 2 must not be killed meanwhile (two of three down: no quorum)
    wait_for(lambda: target.store_lock.locked() and second.is_alive(), timeout=10, what="the second fault waiting")
    assert cluster.events == ["kill 3"]
    cluster.release.set()
    first.join(30)
    second.join(30)
    assert cluster.events == ["kill 3", "whole 3", "kill 2", "whole 2"]
    outcomes = {line["target"]: line["outcome"] for line in rec.lines}
    assert outcomes["3"] == "killed, restarted, ring whole"
    assert outcomes["2"].startswith("killed, restarted, ring whole")
