"""SIGTERM stops `notee api` gracefully, with exit code 0 (docs/RELIABILITY.md "API SIGTERM"): uvicorn
raised the signal again once its shutdown was done, with the default handler back, so every SIGTERM
ended the process with -15, before its Runtime was closed (seen in the node-loss fault run, where a Cassandra
node was lost). A node that does not answer is made here without the fault cluster: a TCP switch
in front of the single test node, frozen (connections stay open, no byte goes through)."""

from __future__ import annotations

import signal
import subprocess
import threading

import httpx
import pytest

from tests.support.processes import NoteeProcess
from tests.support.tcp_switch import TcpSwitch
from tests.support.waiting import wait_for


def _exit_code(api: NoteeProcess, within_s: float) -> int:
    try:
        return api.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the API did not exit within {within_s} s of its SIGTERM:\n{api.output()[-2000:]}")


def test_sigterm_stops_an_idle_api_with_exit_0(processes):
    api = processes.api()
    api.signal(signal.SIGTERM)
    assert _exit_code(api, 30) == 0, api.output()[-2000:]
    assert "Application shutdown complete" in api.output()


@pytest.mark.parametrize(("budget_s", "answered"), [(10, True), (1, False)], ids=["within-budget", "past-budget"])
def test_sigterm_while_cassandra_does_not_answer_drains_in_flight_requests_and_exits_0(
    settings, processes, budget_s, answered
):
    """A readiness probe waits for a Cassandra node that does not answer (its 3 s timeout); the
    SIGTERM comes meanwhile. Within the shutdown budget the probe is answered (503, Cassandra down);
    past it, it is cut. Either way the process exits 0, within the budget and the probe's timeout."""
    with TcpSwitch(settings.cassandra_hosts[0], settings.cassandra_port) as switch:
        api = processes.api(
            NOTEE_CASSANDRA_HOSTS="127.0.0.1",
            NOTEE_CASSANDRA_PORT=str(switch.port),
            NOTEE_API_SHUTDOWN_BUDGET_S=str(budget_s),
        )  # its /healthz answered through the switch: the API's Cassandra session is up
        switch.freeze()
        answer: dict[str, httpx.Response | BaseException] = {}

        def probe() -> None:
            try:
                answer["r"] = httpx.get(f"{api.url}/readyz", timeout=60)
            except BaseException as exc:  # reported below
                answer["r"] = exc

        held = switch.held
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        wait_for(lambda: switch.held > held, timeout=30, what="the probe to wait for Cassandra")
        api.signal(signal.SIGTERM)
        code = _exit_code(api, budget_s + 30)
        prober.join(30)
        switch.thaw()
    assert code == 0, api.output()[-2000:]
    r = answer["r"]
    if answered:
        assert isinstance(r, httpx.Response) and r.status_code == 503, r
        assert r.json()["cassandra"].startswith("down: ") and r.json()["mysql"] == "ok"
    else:
        assert isinstance(r, httpx.HTTPError) or (isinstance(r, httpx.Response) and r.status_code >= 500), r
