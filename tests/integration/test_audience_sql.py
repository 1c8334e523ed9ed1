"""The audience walk and count on MariaDB (notee/store/audience_sql.py, docs/AUDIENCES.md "Design"):
a filter over tags and attributes selects the devices it says, pages resume exactly after their
checkpoint, negations and excluded filters hold for users without the tag, counts agree with the
walk, another service's rows are never read, and the page read uses the device primary key and
user_tag's primary key (EXPLAIN)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from notee.core.audience import Audience
from notee.domain.filters import parse_filter
from notee.domain.versions import version_key
from notee.store.audience_sql import SLOTS, AudienceQuery, count, device_page, explain_page, marked_page
from notee.store.runtime import Runtime
from tests.support import registry
from tests.support.tenants import new_service_id

NOW = datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def _add_user(
    runtime: Runtime,
    service: str,
    n: int,
    tags: dict[str, tuple[str, Any]],
    devices: list[tuple[str, str, str | None, str]],
) -> str:
    """A user (locale ko or en by parity) with tags {key: (kind, value)} and devices (token, os, app_version, region)."""
    user_id = str(uuid.uuid4())
    with runtime.sessions() as s:
        s.execute(
            text(
                "INSERT INTO `user` (service, service_user_id, service_user_name, locale, user_id, created_at, updated_at)"
                " VALUES (:s, :su, '', :loc, :u, :now, :now)"
            ),
            {"s": service, "su": f"u{n}", "loc": "ko" if n % 2 else "en", "u": user_id, "now": NOW - timedelta(days=n)},
        )
        for token, os_, version, region in devices:
            s.execute(
                text(
                    "INSERT INTO device (service, user_id, device_token, device_os, region, app_version, app_version_key,"
                    " created_at, updated_at) VALUES (:s, :u, :t, :os, :r, :v, :vk, :now, :seen)"
                ),
                {
                    "s": service,
                    "u": user_id,
                    "t": token,
                    "os": os_,
                    "r": region,
                    "v": version,
                    "vk": version_key(version) if version else None,
                    "now": NOW,
                    "seen": NOW - timedelta(hours=n),
                },
            )
        for key, (kind, value) in tags.items():
            s.execute(
                text(
                    "INSERT INTO user_tag (service, user_id, tag_key, kind, value_str, value_num, updated_at)"
                    " VALUES (:s, :u, :k, :kind, :vs, :vn, :now)"
                ),
                {
                    "s": service,
                    "u": user_id,
                    "k": key,
                    "kind": kind,
                    "vs": value if kind == "s" else None,
                    "vn": None if kind == "s" else value,
                    "now": NOW,
                },
            )
        s.commit()
    return user_id


@pytest.fixture(scope="module")
def population(runtime: Runtime) -> tuple[str, str, dict[str, str]]:
    """Two services; the first has 40 users (user n: plan pro for n % 4 == 0, age n, an iOS device with
    app version 5.n % 12 in KR for even n, an Android device in JP for every n), the second one user
    with the same tags who must never be read. Returns (service, other service, token -> user_id)."""
    service, other = new_service_id(), new_service_id()
    registry.make_service(runtime, service, "UTC", fcm=False)
    registry.make_service(runtime, other, "UTC", fcm=False)
    owner: dict[str, str] = {}
    for n in range(40):
        tags: dict[str, tuple[str, Any]] = {"age": ("n", float(n))}
        if n % 4 == 0:
            tags["plan"] = ("s", "pro")
        devices = [(f"aos-{n:03d}-token", "AOS", None, "JP")]
        if n % 2 == 0:
            devices.append((f"ios-{n:03d}-token", "IOS", f"5.{n % 12}", "KR"))
        user_id = _add_user(runtime, service, n, tags, devices)
        owner.update({t: user_id for t, *_ in devices})
    _add_user(runtime, other, 0, {"plan": ("s", "pro"), "age": ("n", 1.0)}, [("other-ios-token", "IOS", "9.0", "KR")])
    return service, other, owner


def _walk(runtime: Runtime, service: str, query: AudienceQuery, limit: int = 3) -> list[tuple[str, str, str]]:
    """Every device of the audience, slot by slot, a page of ``limit`` at a time, each page resumed
    after the last row of the one before (as a checkpointed task does)."""
    rows: list[tuple[str, str, str]] = []
    with runtime.sessions() as s:
        for slot in range(SLOTS):
            after = None
            while True:
                page = device_page(s, service, query, slot, after, limit)
                rows += page
                if len(page) < limit:
                    break
                after = (page[-1][0], page[-1][1])
    return rows


def _query(raw: Any, exclude: Any = None, platforms: tuple[str, ...] | None = None) -> AudienceQuery:
    audience = Audience((parse_filter(raw),), (parse_filter(exclude),) if exclude else ())
    return AudienceQuery(audience, platforms, NOW)


def _ns(tokens: list[str]) -> set[int]:
    return {int(t.split("-")[1]) for t in tokens}


def test_a_filter_walks_exactly_its_devices_in_pages(
    runtime: Runtime, population: tuple[str, str, dict[str, str]]
) -> None:
    service, _, owner = population
    query = _query(
        [[{"tag": "plan", "op": "=", "value": "pro"}, {"attribute": "app_version", "op": ">=", "value": "5.4"}]]
    )
    rows = _walk(runtime, service, query)
    tokens = [t for _, t, _ in rows]
    assert len(tokens) == len(set(tokens))  # each device once, though pages split users
    # pro: n % 4 == 0; iOS with 5.(n % 12) >= 5.4: n % 12 in (4, 8) -> n in 4, 8, 16, 20, 28, 32
    assert _ns(tokens) == {4, 8, 16, 20, 28, 32} and all(t.startswith("ios-") for t in tokens)
    assert all(owner[t] == u for u, t, _ in rows)


def test_or_groups_negations_and_excluded_filters(
    runtime: Runtime, population: tuple[str, str, dict[str, str]]
) -> None:
    service, _, _ = population
    either = _walk(
        runtime, service, _query([[{"tag": "age", "op": "<", "value": 2}], [{"tag": "age", "op": ">=", "value": 38}]])
    )
    assert _ns([t for _, t, _ in either]) == {0, 1, 38, 39}
    not_pro = _walk(
        runtime,
        service,
        _query([[{"tag": "plan", "op": "!=", "value": "pro"}, {"attribute": "platform", "op": "=", "value": "IOS"}]]),
    )
    assert _ns([t for _, t, _ in not_pro]) == {n for n in range(40) if n % 2 == 0 and n % 4 != 0}
    excluded = _walk(
        runtime,
        service,
        _query(
            [[{"tag": "age", "op": "<", "value": 10}]], exclude=[[{"tag": "plan", "op": "exists"}]], platforms=("AOS",)
        ),
    )
    assert _ns([t for _, t, _ in excluded]) == {1, 2, 3, 5, 6, 7, 9}
    korean = _walk(
        runtime,
        service,
        _query(
            [[{"attribute": "locale", "op": "=", "value": "ko"}, {"attribute": "country", "op": "=", "value": "JP"}]]
        ),
    )
    assert _ns([t for _, t, _ in korean]) == {n for n in range(40) if n % 2}
    recent = _walk(
        runtime, service, _query([[{"attribute": "created_at", "op": "elapsed_lt", "value": 3 * 86400 - 60}]])
    )
    assert _ns([t for _, t, _ in recent]) == {0, 1, 2}


def test_the_count_agrees_with_the_walk_and_never_reads_another_service(
    runtime: Runtime, population: tuple[str, str, dict[str, str]]
) -> None:
    service, other, _ = population
    query = _query([[{"tag": "plan", "op": "=", "value": "pro"}]])
    with runtime.sessions() as s:
        reach = count(s, service, query)
        elsewhere = count(s, other, query)
    assert reach.devices_by_platform == {"AOS": 10, "IOS": 10} and reach.users == 10 and reach.devices == 20
    assert elsewhere.users == 1 and elsewhere.devices_by_platform == {"IOS": 1}
    assert len(_walk(runtime, service, query, limit=1000)) == 20
    assert "other-ios-token" not in {t for _, t, _ in _walk(runtime, service, query)}


def test_the_page_read_uses_the_primary_keys(runtime: Runtime, population: tuple[str, str, dict[str, str]]) -> None:
    service, _, _ = population
    query = _query([[{"tag": "plan", "op": "=", "value": "pro"}, {"attribute": "locale", "op": "=", "value": "ko"}]])
    with runtime.sessions() as s:
        plan = explain_page(s, service, query)
    # MariaDB may drive from the device's primary key (a range of the slot) or, for a selective tag,
    # from user_tag (a semi-join): either way every table is read through one of these indexes, never
    # scanned whole; the shared-token probe (d2) is index-only on ix_device_token, once per row.
    allowed = {
        "d": {"PRIMARY"},
        "d2": {"ix_device_token"},
        "u": {"uq_user_user_id"},
        "user_tag": {"PRIMARY", "ix_user_tag_str"},
    }
    tables = [row for row in plan if not row["table"].startswith("<")]  # <subqueryN>: a materialised semi-join
    assert {row["table"] for row in tables} == set(allowed), plan
    for row in tables:
        assert row["type"] != "ALL" and row["key"] in allowed[row["table"]], plan
    probe = next(row for row in tables if row["table"] == "d2")
    assert "Using index" in (probe["Extra"] or "") and probe["select_type"] == "DEPENDENT SUBQUERY", probe


def _marks(runtime: Runtime, service: str, query: AudienceQuery) -> dict[tuple[str, str], bool]:
    """(user_id, token) -> the page's shared mark, every slot walked a page of two at a time."""
    marks: dict[tuple[str, str], bool] = {}
    with runtime.sessions() as s:
        for slot in range(SLOTS):
            after = None
            while True:
                page = marked_page(s, service, query, slot, after, 2)
                marks |= {(user, token): shared for user, token, _, shared in page}
                if len(page) < 2:
                    break
                after = (page[-1][0], page[-1][1])
    return marks


def test_a_page_marks_exactly_the_tokens_another_user_of_the_service_holds(runtime: Runtime) -> None:
    """The walk's per-row probe (each device sent once): a token is marked when another user of the
    service holds it at the read, whether that user is in the audience or not; never for another
    service's holder; and the mark follows registrations and deletes (no state kept beside the rows)."""
    service, other = new_service_id(), new_service_id()
    registry.make_service(runtime, service, "UTC", fcm=False)
    registry.make_service(runtime, other, "UTC", fcm=False)
    pro = {"plan": ("s", "pro")}
    a = _add_user(runtime, service, 1, pro, [("tok-shared", "AOS", None, "KR"), ("tok-a", "IOS", None, "KR")])
    _add_user(runtime, service, 2, {"plan": ("s", "free")}, [("tok-shared", "AOS", None, "KR")])  # not in the audience
    c = _add_user(runtime, service, 3, pro, [("tok-c", "AOS", None, "KR")])
    d_ = _add_user(runtime, service, 4, pro, [("tok-elsewhere", "AOS", None, "KR")])
    _add_user(runtime, other, 1, pro, [("tok-elsewhere", "AOS", None, "KR"), ("tok-c", "AOS", None, "KR")])
    query = _query([[{"tag": "plan", "op": "=", "value": "pro"}]])
    assert _marks(runtime, service, query) == {
        (a, "tok-shared"): True,
        (a, "tok-a"): False,
        (c, "tok-c"): False,
        (d_, "tok-elsewhere"): False,
    }
    late = _add_user(runtime, service, 5, {}, [("tok-c", "IOS", None, "KR")])  # registers c's token
    assert _marks(runtime, service, query)[(c, "tok-c")] is True
    with runtime.sessions.begin() as s:
        s.execute(text("DELETE FROM device WHERE service = :s AND user_id = :u"), {"s": service, "u": late})
    assert _marks(runtime, service, query)[(c, "tok-c")] is False
    slot = int(a[:2], 16)
    with runtime.sessions() as s:  # the same rows, in the same order, as the unmarked page
        marked = marked_page(s, service, query, slot, None, 10)
        assert [r[:3] for r in marked] == device_page(s, service, query, slot, None, 10) != []
