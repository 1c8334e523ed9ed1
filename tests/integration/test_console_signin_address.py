"""The console's sign-in throttle against a real `notee api` (issue 31, docs/CONSOLE.md "Sign-in and
sessions"): it counts per real client address, which a client cannot change with X-Forwarded-For
unless the operator named a trusted proxy (NOTEE_API_TRUSTED_PROXIES), and it allows exactly the
documented number of tries, also when they arrive at once. Each test signs in from its own loopback
address (127.0.0.x), a client of its own to the server."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.support.processes import NoteeProcess, Processes

FAILURES = 3
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture(scope="module")
def procs(migrated: None) -> Iterator[Processes]:
    with Processes() as p:
        yield p


@pytest.fixture(scope="module")
def api(procs: Processes) -> NoteeProcess:
    return procs.api(NOTEE_CONSOLE_SIGNIN_FAILURES=str(FAILURES))


def _browser(api: NoteeProcess, source: str) -> httpx.Client:
    return httpx.Client(base_url=api.url, transport=httpx.HTTPTransport(local_address=source), timeout=30)


def _form(c: httpx.Client) -> str:
    """The sign-in form's CSRF token (its cookie stays in ``c``)."""
    page = c.get("/console/sign-in")
    match = CSRF.search(page.text)
    assert page.status_code == 200 and match
    return match.group(1)


def _post(c: httpx.Client, csrf: str, secret: str, forwarded_for: str | None = None) -> int:
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    form = {"csrf": csrf, "secret": secret, "next": "/console/"}
    return c.post("/console/sign-in", data=form, headers=headers).status_code


def _key(tenant) -> str:
    return str(tenant.headers["Authorization"].removeprefix("Bearer "))


def _try(c: httpx.Client, secret: str, forwarded_for: str | None = None) -> int:
    return _post(c, _form(c), secret, forwarded_for)


def test_a_forwarded_for_header_chosen_by_the_client_does_not_reset_the_count(api, tenant):
    with _browser(api, "127.0.0.11") as c:
        got = [_try(c, "nk_wrong", forwarded_for=f"198.51.100.{i}") for i in range(FAILURES + 3)]
        right_key = _try(c, _key(tenant), forwarded_for="198.51.100.200")
    assert got == [401] * FAILURES + [429] * 3
    assert right_key == 429  # even the right key waits, as documented


def test_tries_at_once_are_not_more_than_the_documented_count(api):
    clients = [_browser(api, "127.0.0.12") for _ in range(10 * FAILURES)]
    forms = [_form(c) for c in clients]
    statuses: list[int] = []
    start = threading.Barrier(len(clients))

    def attempt(c: httpx.Client, csrf: str) -> None:
        start.wait()
        # a well-formed key of no service: looked up in MySQL, the moment other tries could slip past
        statuses.append(_post(c, csrf, "nk_0123456789abcdef_" + "x" * 43))

    threads = [threading.Thread(target=attempt, args=pair) for pair in zip(clients, forms, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    assert sorted(statuses) == [401] * FAILURES + [429] * (9 * FAILURES)


def test_a_sign_in_that_succeeds_is_not_counted(api, tenant):
    with _browser(api, "127.0.0.13") as c:
        for _ in range(FAILURES + 2):
            assert _try(c, _key(tenant)) == 303  # signed in, again and again: no try used up
        assert [_try(c, "nk_wrong") for _ in range(FAILURES + 1)] == [401] * FAILURES + [429]


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(procs, tenant):
    proxied = procs.api(
        name="api-behind-proxy", NOTEE_CONSOLE_SIGNIN_FAILURES=str(FAILURES), NOTEE_API_TRUSTED_PROXIES="127.0.0.14"
    )
    with _browser(proxied, "127.0.0.14") as proxy:
        # the proxy appends the address it saw: what the client wrote before it is not believed
        first = [_try(proxy, "nk_wrong", forwarded_for=f"203.0.113.{i}, 198.51.100.1") for i in range(FAILURES + 1)]
        other = _try(proxy, "nk_wrong", forwarded_for="198.51.100.2")
    assert first == [401] * FAILURES + [429]
    assert other == 401  # another client behind the same proxy: its own count
