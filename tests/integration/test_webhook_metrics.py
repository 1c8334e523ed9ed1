"""The webhook dispatcher's metrics (issue 37; docs/METRICS.md): a real `notee webhooks` process serves
/metrics on NOTEE_WEBHOOKS_METRICS_PORT with the outbox's levels (read when scraped, agreeing with the
table) and every attempt counted by its answer's class and what the delivery became, never by URL or
service. The outbox is shared by every test of the session: each test first lets what is already due
there be attempted (and pushed back by a long backoff), so that the figures it compares are its own."""

from __future__ import annotations

import secrets
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from notee.core.settings import Settings
from notee.domain import webhooks
from notee.domain.credentials import credentials_box
from notee.store import webhooks_sql
from notee.store.runtime import Runtime
from notee.webhooks.dispatcher import _refused_address, error_class, status_class
from tests.support.logscan import remember_secret
from tests.support.metrics import Scrape, scrape, worker_metrics_url
from tests.support.processes import Processes, free_port, subprocess_env, wait_http
from tests.support.registry import new_service
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import Receiver, dispatch_until_idle, start_receiver

LONG_BACKOFF_S = "600"  # a failed attempt's delivery is due again 5-10 minutes later: never within a test


@pytest.fixture()
def receiver(tmp_path) -> Iterator[Receiver]:
    yield from start_receiver(tmp_path / "receiver-tls")


@dataclass
class Silent:
    """A TCP server that accepts connections and never answers: a TLS handshake there times out."""

    listener: socket.socket
    held: list[socket.socket] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.listener.getsockname()[1]}/hooks"

    def hold(self) -> None:
        while True:
            try:
                self.held.append(self.listener.accept()[0])
            except OSError:  # closed at teardown
                return


@pytest.fixture()
def silent() -> Iterator[Silent]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    server = Silent(listener)
    threading.Thread(target=server.hold, daemon=True).start()
    yield server
    listener.close()
    for conn in server.held:
        conn.close()


def _endpoint(runtime: Runtime, service: str, url: str) -> str:
    """An endpoint of ``service`` at ``url`` (private addresses allowed: the local servers); its id."""
    settings = runtime.settings.model_copy(update={"webhook_allow_private_addresses": True})
    with runtime.sessions.begin() as s:
        created = webhooks.create_endpoint(
            s, credentials_box(settings), settings, service, url=url, events=None, description=None
        )
    remember_secret(created.secret)
    return created.endpoint.endpoint_id


def _emit(runtime: Runtime, service: str) -> None:
    with runtime.sessions.begin() as s:
        assert webhooks_sql.emit(s, service, "job.finished", {"job_id": "j"}) >= 1


def _deliveries(runtime: Runtime, service: str) -> list[webhooks_sql.Delivery]:
    with runtime.sessions() as s:
        ids = s.execute(text("SELECT endpoint_id FROM webhook_endpoint WHERE service = :s"), {"s": service}).scalars()
        return [d for e in ids for d in webhooks_sql.list_deliveries(s, service, e)]


def _outbox_in_the_table(runtime: Runtime) -> tuple[int, int]:
    """(pending, due) counted in webhook_delivery directly."""
    with runtime.sessions() as s:
        row = s.execute(
            text(
                "SELECT COUNT(*) AS pending, COALESCE(SUM(next_attempt_at <= UTC_TIMESTAMP(6)), 0) AS due"
                " FROM webhook_delivery WHERE state = 'pending'"
            )
        ).one()
    return int(row.pending), int(row.due)


def _settled(runtime: Runtime, url: str) -> Scrape | None:
    """A scrape taken while nothing is due and the table said the same just before and just after."""
    first = _outbox_in_the_table(runtime)
    got = scrape(url)
    if first == _outbox_in_the_table(runtime) == (got.value("notee_webhook_outbox_depth"), 0):
        assert (
            got.value("notee_webhook_outbox_due") == 0 and got.value("notee_webhook_outbox_oldest_due_age_seconds") == 0
        )
        return got
    return None


def _backlog(url: str) -> Scrape | None:
    """The scrape once the outbox shows the backlog: three or more deliveries due, the oldest for a second."""
    levels = scrape(url)
    due = levels.value("notee_webhook_outbox_due") >= 3
    return levels if due and levels.value("notee_webhook_outbox_oldest_due_age_seconds") >= 1.0 else None


def test_the_dispatcher_process_serves_the_outbox_levels_and_attempts_by_answer_class(
    client, settings, runtime, processes: Processes, receiver, silent
) -> None:
    slow, busy = "WHS" + secrets.token_hex(4).upper(), "WHB" + secrets.token_hex(4).upper()
    for service in (slow, busy):
        new_service(client, settings, service)
    _endpoint(runtime, slow, silent.url)  # holds the dispatcher's only slot until its timeout
    urls = [receiver.url, receiver.url + "/second", f"https://127.0.0.1:{free_port()}/closed"]
    for url in urls:
        _endpoint(runtime, busy, url)
    receiver.fail_first = 1  # of the two requests the receiver gets, one is answered 500 and one 200
    port = free_port()
    dispatcher = processes.start(
        "webhooks",
        ["webhooks"],
        subprocess_env(
            NOTEE_WEBHOOKS_METRICS_PORT=str(port),
            NOTEE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES="true",
            NOTEE_WEBHOOK_CA_FILE=str(receiver.ca_file),
            NOTEE_WEBHOOK_BACKOFF_BASE_S=LONG_BACKOFF_S,
            NOTEE_WEBHOOK_CONCURRENCY="1",
            NOTEE_WEBHOOK_TIMEOUT_S="10",
        ),
    )
    url = worker_metrics_url(port)
    wait_http(url, proc=dispatcher)
    assert "webhooks: metrics on http://127.0.0.1:" in dispatcher.output()
    before = wait_for(lambda: _settled(runtime, url), timeout=120, what="the outbox settled, nothing due")

    _emit(runtime, slow)
    wait_for(lambda: silent.held, timeout=30, what="the dispatcher connected to the silent endpoint")
    _emit(runtime, busy)  # three deliveries due while the only slot waits on the silent endpoint
    backlog = wait_for(lambda: _backlog(url), timeout=30, what="three deliveries due for a second while the slot waits")
    assert backlog.value("notee_webhook_outbox_depth") - before.value("notee_webhook_outbox_depth") == 4
    assert [d.attempts for d in _deliveries(runtime, busy)] == [0, 0, 0]  # still waiting: the levels saw a backlog

    wait_for(
        lambda: all(d.attempts == 1 for d in _deliveries(runtime, busy) + _deliveries(runtime, slow)),
        timeout=90,
        what="one attempt at each delivery",
    )
    after = wait_for(lambda: _settled(runtime, url), timeout=60, what="the outbox settled again")

    def moved(answer: str, outcome: str) -> float:
        name, labels = "notee_webhook_attempts_total", {"answer": answer, "outcome": outcome}
        return after.value(name, **labels) - before.value(name, **labels)

    assert moved("timeout", "retry") == 1
    assert moved("2xx", "delivered") == 1
    assert moved("5xx", "retry") == 1
    assert moved("connect", "retry") >= 1  # what else was due at a closed port joined in
    # The delivered one left the outbox; the three others wait for their next attempt.
    assert after.value("notee_webhook_outbox_depth") - before.value("notee_webhook_outbox_depth") == 3
    states = sorted((d.state, d.last_status or 0) for d in _deliveries(runtime, busy) + _deliveries(runtime, slow))
    assert states == [("delivered", 200), ("pending", 0), ("pending", 0), ("pending", 500)]
    labels = {k for (name, ls) in after.samples if name.startswith("notee_webhook") for k, _ in ls}
    assert labels <= {"answer", "outcome"}
    for secret_ish in (*urls, silent.url, slow, busy):
        assert secret_ish not in after.text  # no URL or service is ever a label
    assert not [name for (name, _) in after.samples if name.endswith("_created")]  # no _created series
    dispatcher.stop()
    assert "webhooks dispatcher stopped" in dispatcher.output()


def _attempts(answer: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("notee_webhook_attempts_total", {"answer": answer, "outcome": outcome}) or 0.0


def _attempts_in_the_table(runtime: Runtime) -> dict[int, tuple[int, str, str]]:
    """Every delivery's attempts so far, its last error and its state, read from webhook_delivery directly."""
    with runtime.sessions() as s:
        rows = s.execute(
            text("SELECT delivery_id, attempts, COALESCE(last_error, '') AS e, state FROM webhook_delivery")
        )
        return {int(r.delivery_id): (int(r.attempts), str(r.e), str(r.state)) for r in rows}


def _dispatched(runtime: Runtime, settings: Settings, errors_with: str) -> int:
    """Run a dispatcher until idle; how many attempts whose error contains ``errors_with`` the outbox
    shows it made, in every tenant's rows, of deliveries still pending after them (the ``retry``
    outcome: an earlier run's delivery over a day old fails for good instead, counted ``failed``).

    The dispatcher claims every tenant's due rows, and another test's delivery can fall due during the
    run: the expected count is read from the table (attempts that rose, whose last error says so),
    not assumed to be this test's one delivery."""
    before = _attempts_in_the_table(runtime)
    dispatch_until_idle(settings)
    after = _attempts_in_the_table(runtime)
    made = sum(
        attempts - before.get(delivery, (0, "", ""))[0]
        for delivery, (attempts, error, state) in after.items()
        if errors_with in error and state == "pending"
    )
    return made


def test_an_untrusted_certificate_and_a_refused_address_are_counted_by_their_class(
    client, settings, runtime, service_id, receiver
) -> None:
    """In-process dispatchers, counted in this process's registry: a certificate the dispatcher does
    not trust is ``tls``; a host resolving to loopback while private addresses are refused is
    ``refused_address`` (no request made). Each counter rises by exactly the attempts of its class the
    outbox shows were made (this test's own delivery among them)."""
    new_service(client, settings, service_id)
    base = Settings().model_copy(update={"webhook_backoff_base_s": float(LONG_BACKOFF_S)})
    trusting = base.model_copy(update={"webhook_allow_private_addresses": True})  # no CA file: untrusted
    dispatch_until_idle(trusting)  # what was already due is attempted and pushed back first
    _endpoint(runtime, service_id, receiver.url)
    _emit(runtime, service_id)
    tls_before = _attempts("tls", "retry")
    tls_made = _dispatched(runtime, trusting, "CERTIFICATE_VERIFY_FAILED")
    assert tls_made >= 1 and _attempts("tls", "retry") - tls_before == tls_made
    other = "WHR" + secrets.token_hex(4).upper()
    new_service(client, settings, other)
    _endpoint(runtime, other, receiver.url.replace("127.0.0.1", "localhost"))
    _emit(runtime, other)
    refused_before = _attempts("refused_address", "retry")
    refused_made = _dispatched(runtime, base, "); refused")
    assert refused_made >= 1 and _attempts("refused_address", "retry") - refused_before == refused_made
    assert receiver.received == []  # the TLS handshake failed; the refused address was never called
    [tls], [refused] = _deliveries(runtime, service_id), _deliveries(runtime, other)
    assert tls.attempts == 1 and "CERTIFICATE_VERIFY_FAILED" in (tls.last_error or "")
    assert refused.attempts == 1 and "loopback" in (refused.last_error or "")


@pytest.mark.parametrize(
    ("status", "answer"), [(200, "2xx"), (204, "2xx"), (301, "3xx"), (410, "4xx"), (429, "4xx"), (503, "5xx")]
)
def test_status_classes(status: int, answer: str) -> None:
    assert status_class(status) == answer


def test_error_classes_and_an_unresolvable_name() -> None:
    request = httpx.Request("POST", "https://hooks.example.com/x")
    assert error_class(httpx.ConnectTimeout("t", request=request)) == "timeout"
    assert error_class(httpx.ReadTimeout("t", request=request)) == "timeout"
    assert error_class(httpx.ConnectError("refused", request=request)) == "connect"
    assert error_class(httpx.RemoteProtocolError("reset", request=request)) == "transport"
    handshake = httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED]", request=request)
    handshake.__cause__ = OSError("the transport's own error")
    handshake.__cause__.__context__ = ssl.SSLCertVerificationError(1, "CERTIFICATE_VERIFY_FAILED")
    assert error_class(handshake) == "tls"  # found anywhere in the chain of causes
    refused = _refused_address("https://no-such-host.invalid/x")  # RFC 6761: never resolves
    assert refused is not None and refused.answer == "unresolved" and not refused.delivered
