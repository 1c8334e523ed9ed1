"""Delivery webhooks (issue 18 item 4; docs/WEBHOOKS.md): a service registers an HTTPS endpoint and
receives signed job.finished / job.failed / token.pruned / dead_letter.created events, at least once,
retried with backoff, without ever holding fan-out up. The receiver is a real local HTTPS server with
its own CA (tests/support/webhook_receiver.py) that checks every signature and fails on purpose.

Here, the rules that need no server; tests/integration/test_webhooks.py has the rest."""

from __future__ import annotations

import pytest

from notee.core.settings import Settings
from notee.domain import webhooks
from notee.webhooks.dispatcher import retry_delay


def test_retry_delay_doubles_up_to_an_hour_with_jitter():
    import random

    rng = random.Random(7)
    delays = [retry_delay(n, 5.0, rng) for n in range(1, 14)]
    for n, d in enumerate(delays, start=1):
        ceiling = min(3600.0, 5.0 * 2 ** (n - 1))
        assert ceiling / 2 <= d <= ceiling
    assert max(delays) <= 3600.0 and delays[-1] >= 1800.0


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.7", "private"),
        ("192.168.1.1", "private"),
        ("172.16.0.1", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("fe80::1", "link-local"),
        ("::ffff:127.0.0.1", "loopback"),  # an IPv4-mapped IPv6 address is judged as the IPv4 one
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "not public"),  # carrier-grade NAT
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
        # an IPv6 address a router sends on to an IPv4 one is judged by that one too
        ("2002:7f00:1::", "6to4-embedded loopback"),
        ("2002:a9fe:a9fe::1", "6to4-embedded link-local"),
        ("2002:a00:1::1", "6to4-embedded private"),
        ("2002:808:808::1", None),  # 6to4 of a public address
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo-embedded loopback"),  # client 127.0.0.1 (inverted)
        ("2001:0:a00:1:8000:63bf:7b5d:3c4a", "Teredo-embedded private"),  # server 10.0.0.1
        ("64:ff9b::7f00:1", "reserved"),  # NAT64: refused whole
        ("64:ff9b::808:808", "reserved"),
    ],
)
def test_address_rules(address, refused):
    assert webhooks.address_refused(address) == refused


@pytest.mark.parametrize(
    "url",
    [
        "https://2130706433/x",  # 127.0.0.1 in the forms getaddrinfo accepts (and the dispatcher would resolve)
        "https://0x7f000001/x",
        "https://0x7f.1/x",
        "https://0177.0.0.1/x",
        "https://127.1/x",
        "https://127.0.0.1./x",
        "https://localhost./x",
        "https://[2002:7f00:1::]/x",
        "https://0xa9fea9fe/latest/meta-data",  # 169.254.169.254
    ],
)
def test_an_address_in_any_form_is_refused_at_registration(url):
    with pytest.raises(webhooks.InvalidInput) as refused:
        webhooks.check_url(url, Settings())
    assert refused.value.details[0]["type"] == "url_address"


def test_public_addresses_in_old_forms_and_numeric_looking_names_pass():
    for url in ("https://0x08080808/x", "https://8.8.8.8./x", "https://1e100.net/x", "https://123.example/x"):
        assert webhooks.check_url(url, Settings()) == url


def test_plain_http_and_private_addresses_only_behind_their_settings():
    strict = Settings()
    dev = strict.model_copy(update={"webhook_allow_http": True, "webhook_allow_private_addresses": True})
    for url in ("http://hooks.example.com/x", "https://127.0.0.1:8443/x"):
        with pytest.raises(webhooks.InvalidInput):
            webhooks.check_url(url, strict)
        assert webhooks.check_url(url, dev) == url
    assert webhooks.check_url("https://hooks.example.com/x?a=1", strict) == "https://hooks.example.com/x?a=1"


def test_engagement_events_are_opt_in_and_batched_within_the_bounds():
    from notee.core.vocabulary import DEFAULT_WEBHOOK_EVENTS, RECEIPT_WEBHOOK_EVENTS
    from notee.domain.webhooks import check_events
    from notee.store import receipt_outbox_sql

    assert check_events(None) == list(DEFAULT_WEBHOOK_EVENTS) and not set(RECEIPT_WEBHOOK_EVENTS) & set(
        check_events(None)
    )
    assert check_events(["receipt.opened", "job.failed"]) == ["job.failed", "receipt.opened"]
    event = {"notification_id": "a" * 32 + "." + "b" * 11, "event": "clicked", "action": "x" * 64, "at": "t" * 27}
    runs = list(receipt_outbox_sql.chunks([event] * 250, 100))
    assert [len(r) for r in runs] == [100, 100, 50]
    big = dict(event, action="y" * 5000)  # no real event is this big: the byte bound still holds
    runs = list(receipt_outbox_sql.chunks([big] * 40, 100))
    assert all(len(r) * 5100 < receipt_outbox_sql.MAX_BODY_BYTES for r in runs) and sum(map(len, runs)) == 40
