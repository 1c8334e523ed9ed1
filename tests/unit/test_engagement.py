"""The pure rules of engagement (docs/ENGAGEMENT.md): the notification id, its splicing into the
one body a page shares (byte-identical to encoding each message), the client keys' route rule and
their place in the key cache, the receipts' per-item refusals and the stats' day range."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pytest

from notee.api.auth import ApiKeyCache, check_client_key_route
from notee.core import crypto, notification_id
from notee.core.errors import Forbidden, InvalidInput
from notee.providers import apns, fcm, fcm_body
from notee.providers.base import Message
from notee.providers.payload import Rich
from notee.usecases.engagement_stats import Counts, check_range
from notee.usecases.receipts import ReceiptEvent, Source, SourceCache, _refusal, scope_keys
from notee.worker.messages import messages_for


def test_the_id_names_the_job_and_a_pseudonym_of_the_device():
    job = "0b8e7d0c-5a55-4c3e-9d1e-2f7b0a9c1d22"
    nid = notification_id.make(notification_id.source_of_job(job), "token-1")
    assert len(nid) == notification_id.MAX_LEN == len(notification_id.SAMPLE)
    source, device = notification_id.parse(nid) or ("", "")
    assert notification_id.job_id_of(source) == job
    assert device == notification_id.device_part("token-1") != notification_id.device_part("token-2")
    assert "token" not in nid
    single = notification_id.new_single_source()
    assert notification_id.job_id_of(single) is None and notification_id.parse(f"{single}.{device}")
    for bad in ("", "x.y", nid + "x", nid.upper(), nid.replace(".", "-"), "g" * 32 + "." + device):
        assert notification_id.parse(bad) is None, bad


def test_stamp_replaces_a_data_key_of_the_same_name():
    assert notification_id.stamp({"notee_id": "forged", "k": "v"}, "n") == {"notee_id": "n", "k": "v"}
    assert notification_id.stamp({"k": "v"}, "") == {"k": "v"}


def _page(n: int, rich: Rich | None = None, data: dict[str, str] | None = None) -> list[Message]:
    payload = {"title": "T", "body": 'B "quoted"', "data": data or {"k": "v"}}
    if rich is not None:
        payload["rich"] = {"badge": 2, "collapse_key": "c"}
    rows = [(f"tok-{i}", "AOS" if i % 2 else "IOS", f"u{i}", i, None) for i in range(n)]
    return messages_for(rows, payload, None, "0" * 31 + "1")


@pytest.mark.parametrize("rich", [None, Rich.from_spec({"badge": 2, "collapse_key": "c"})])
def test_a_page_encodes_once_and_each_body_is_what_encoding_it_alone_gives(rich):
    cache = fcm_body.PageBodies()
    for m in _page(5, rich):
        assert m.notification_id == notification_id.make("0" * 31 + "1", m.device_token)
        alone = json.dumps({"message": fcm.fcm_message(m)}, separators=(",", ":"), ensure_ascii=False).encode()
        assert cache.body(m) == alone
        assert json.loads(cache.body(m))["message"]["data"]["notee_id"] == m.notification_id


def test_a_message_without_an_id_is_sent_as_before():
    m = Message("tok", "AOS", "T", "B", {"k": "v"})
    assert "notee_id" not in fcm.fcm_message(m)["data"]
    assert fcm_body.PageBodies().body(m) == fcm_body.encode(m)
    assert apns._body_parts(m) == (
        json.dumps(apns.apns_payload("T", "B", {"k": "v"}), separators=(",", ":")).encode(),
        b"",
    )


def test_the_apns_body_carries_the_id_last_whatever_the_data_says():
    m = Message("tok", "IOS", "T", "B", {"notee_id": "forged"}, notification_id="n" * 10)
    head, tail = apns._body_parts(m)
    body = json.loads(head + b'"' + m.notification_id.encode() + b'"' + tail)
    assert body["notee_id"] == "n" * 10 and body["aps"]["alert"] == {"title": "T", "body": "B"}


def test_a_client_key_may_only_post_receipts():
    key = crypto.generate_api_key("client").api_key
    assert key.startswith("nck_") and crypto.key_kind(key) == "client"
    assert crypto.parse_api_key(key) is not None
    check_client_key_route(key, "POST", "/v1/receipts")
    for method, path in (("GET", "/v1/receipts"), ("GET", "/v1/stats"), ("POST", "/v1/users/x/send")):
        with pytest.raises(Forbidden):
            check_client_key_route(key, method, path)
    check_client_key_route(crypto.generate_api_key().api_key, "GET", "/v1/stats")  # a server key: any route
    check_client_key_route(None, "GET", "/v1/stats")


def test_the_cache_never_lets_a_client_key_pass_as_a_server_key():
    cache = ApiKeyCache(60)
    client = crypto.generate_api_key("client").api_key
    cache.remember(client, "SVC", cache.generation())
    assert cache.service_of(client) == "SVC"
    assert cache.service_of("nk_" + client.removeprefix("nck_")) is None


def _source(days_old: float = 0) -> Source:
    made = datetime.now(UTC) - timedelta(days=days_old)
    return Source(scope_keys("t", None, made, "UTC"), made)


def test_each_event_is_refused_for_its_own_reason():
    now = datetime.now(UTC)
    oldest, newest = now - timedelta(days=30), now + timedelta(seconds=300)
    event = ReceiptEvent("id", "opened", now)
    assert _refusal(event, None, oldest, newest) == "not_found"
    assert _refusal(event, _source(), oldest, newest) is None
    assert _refusal(event, _source(days_old=31), oldest, newest) == "too_old"
    assert _refusal(ReceiptEvent("id", "opened", now - timedelta(days=31)), _source(), oldest, newest) == "too_old"
    assert (
        _refusal(ReceiptEvent("id", "opened", now + timedelta(seconds=301)), _source(), oldest, newest) == "in_future"
    )


def test_a_notification_counts_under_its_day_in_the_service_zone():
    made = datetime(2026, 12, 5, 16, 30)  # naive UTC, as stored
    assert scope_keys("news", "sports", made, "Asia/Seoul").day == "2026-12-06"
    assert scope_keys("news", "sports", made, "America/New_York").day == "2026-12-05"
    assert scope_keys("news", "sports", made, "UTC").topic == "news sports"
    assert scope_keys("news", None, made, "UTC").topic is None


def test_the_source_cache_forgets_after_its_ttl():
    now = [0.0]
    cache = SourceCache(ttl_s=10, max_items=2, clock=lambda: now[0])
    cache.put("S", "a", None)
    assert cache.get("S", "a") == (True, None) and cache.get("T", "a") == (False, None)
    now[0] = 11
    assert cache.get("S", "a") == (False, None)
    for k in "bcd":
        cache.put("S", k, None)
    assert cache.get("S", "b") == (False, None) and cache.get("S", "d") == (True, None)


def test_rates_are_over_sent_and_the_range_is_bounded():
    assert Counts(10, 4, {"opened": 1}).rate("opened") == 0.25
    assert Counts(10, 0, {"opened": 1}).rate("opened") is None
    today = date(2026, 12, 5)
    assert check_range(None, None, today) == (date(2026, 11, 6), today)
    with pytest.raises(InvalidInput):
        check_range(date(2026, 12, 6), today, today)
    with pytest.raises(InvalidInput):
        check_range(date(2026, 1, 1), today, today)


def test_a_job_is_kept_as_long_as_its_receipts_or_longer():
    from notee.core.settings import Settings
    from notee.usecases.retention import job_retention_days

    base = Settings()
    assert job_retention_days(base.model_copy(update={"retention_days": 14, "receipts_retention_days": 30})) == 30
    assert job_retention_days(base.model_copy(update={"retention_days": 60, "receipts_retention_days": 30})) == 60
