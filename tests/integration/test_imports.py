"""Bulk import and export (docs/AUDIENCES.md "Import and export") through the real API, MariaDB and
Cassandra: a good file, bad lines kept with their numbers, the same file twice, a file of many chunks,
CSV, tenant isolation, the upload's own body limit, and export -> import -> export round trips.
The chunks are applied in-process here (``drain``: the worker's claim + ``run_chunk``); a real
worker killed mid-import is tests/integration/test_imports_crash.py."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import text

from notee.store import imports_sql
from notee.usecases import imports
from tests.support.lock_waits import running
from tests.support.registry import random_token
from tests.support.waiting import wait_for

NDJSON = {"Content-Type": "application/x-ndjson"}
CSV = {"Content-Type": "text/csv"}


def drain(runtime, service: str) -> None:
    """Apply every open chunk of the service's imports, as the worker's import lane does. A worker
    process another test runs (it serves every service) may hold some of them: wait until it has
    applied them too, so what the test reads next is the whole import."""

    def all_done() -> bool:
        while (claim := imports_sql.claim(runtime.sessions, owner="test", lease_s=30, services=[service])) is not None:
            imports.run_chunk(runtime, claim)
        with runtime.sessions() as s:
            return not s.execute(
                text("SELECT 1 FROM import_chunk WHERE service = :s AND state <> 'done' LIMIT 1"), {"s": service}
            ).first()

    wait_for(all_done, timeout=60, what=f"every import chunk of {service} applied")


def chunks(runtime, import_id: str) -> tuple[int, int]:
    """The import's (chunks_total, chunks_done)."""
    with runtime.sessions() as s:
        row = s.execute(
            text("SELECT chunks_total, chunks_done FROM import_job WHERE import_id = :i"), {"i": import_id}
        ).one()
    return row.chunks_total, row.chunks_done


def upload(tenant, body: str | bytes, headers=NDJSON) -> str:
    r = tenant.client.post("/v1/imports", content=body, headers=tenant.headers | headers)
    assert r.status_code == 202, r.text
    return r.json()["import_id"]


def status(tenant, import_id: str) -> dict[str, Any]:
    r = tenant.client.get(f"/v1/imports/{import_id}", headers=tenant.headers)
    assert r.status_code == 200, r.text
    return r.json()


def errors(tenant, import_id: str, limit: int = 1000) -> list[tuple[int, str]]:
    """Every failed line, walking the pages."""
    out: list[tuple[int, str]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        r = tenant.client.get(f"/v1/imports/{import_id}/errors", params=params, headers=tenant.headers)
        assert r.status_code == 200, r.text
        out += [(e["line"], e["reason"]) for e in r.json()["items"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return out


def export(tenant, fmt: str = "ndjson") -> str:
    r = tenant.client.get("/v1/exports/users", params={"format": fmt}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return r.text


def lines(*docs: dict[str, Any]) -> str:
    return "".join(json.dumps(d) + "\n" for d in docs)


def tables(runtime, service: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the service's users, devices and tags, in order."""
    queries = {
        "user": "SELECT * FROM `user` WHERE service = :s ORDER BY service_user_id",
        "device": "SELECT * FROM device WHERE service = :s ORDER BY user_id, device_token",
        "user_tag": "SELECT * FROM user_tag WHERE service = :s ORDER BY user_id, tag_key",
    }
    with runtime.sessions() as s:
        return {name: [tuple(r) for r in s.execute(text(q), {"s": service})] for name, q in queries.items()}


@pytest.fixture()
def news(tenant) -> Any:
    tenant.template("TOPIC", "news")
    tenant.template("TOPIC", "promo")
    return tenant


def _rich(n: int, prefix: str = "u") -> list[dict[str, Any]]:
    return [
        {
            "user": f"{prefix}-{i:05d}",
            "name": f"User {i}",
            "locale": "ko-KR",
            "timezone": "Asia/Seoul" if i % 2 else "Europe/Berlin",
            "tags": {"plan": "pro" if i % 3 else "free", "age": 20 + i % 50, "beta": i % 2 == 0, "ratio": 0.5},
            "devices": [
                {"token": f"tok-{prefix}-{i:05d}-a", "platform": "IOS", "app_version": "5.2.1", "country": "KR"}
            ],
            "topics": [{"type": "news", "topic": "sports"}],
        }
        for i in range(n)
    ]


def test_a_good_file_imports_users_devices_tags_and_topics(news, runtime):
    docs = _rich(3)
    docs[0]["tags"]["signup"] = {"timestamp": "2026-01-02T03:04:05Z"}
    docs[1]["devices"].append({"token": random_token(), "platform": "AOS"})
    import_id = upload(news, lines(*docs))
    assert status(news, import_id)["state"] == "queued"
    drain(runtime, news.service)
    assert chunks(runtime, import_id) == (1, 1)
    got = status(news, import_id)
    assert (got["state"], got["lines_total"], got["lines_done"], got["lines_failed"]) == ("done", 3, 3, 0)
    assert got["started_at"] and got["finished_at"]
    records = [json.loads(x) for x in export(news).splitlines()]
    assert [r["user"] for r in records] == ["u-00000", "u-00001", "u-00002"]
    assert records[0]["tags"] == {
        "age": 20,
        "beta": True,
        "plan": "free",
        "ratio": 0.5,
        "signup": docs[0]["tags"]["signup"],
    }
    assert records[0]["devices"] == docs[0]["devices"] and len(records[1]["devices"]) == 2
    user_id = news.client.get("/v1/users", headers=news.headers).json()["items"]
    by_name = {u["service_user_id"]: u for u in user_id}
    assert by_name["u-00001"]["timezone"] == "Asia/Seoul" and by_name["u-00001"]["locale"] == "ko-KR"
    subs = news.client.get(f"/v1/users/{by_name['u-00001']['user_id']}/subscriptions", headers=news.headers).json()
    assert [(s["type"], s["topic"], s["devices"]) for s in subs["items"]] == [("news", "sports", 2)]
    with runtime.sessions() as s:
        key = s.execute(
            text("SELECT app_version_key FROM device WHERE service = :s AND device_token = :t"),
            {"s": news.service, "t": docs[0]["devices"][0]["token"]},
        )
        assert key.scalar_one() == "00005.00002.00001"


def test_bad_lines_are_kept_with_their_numbers_and_the_rest_applied(news, runtime):
    good = {"user": "ok-1", "devices": [{"token": random_token(), "platform": "AOS"}]}
    body = "\n".join(
        [
            json.dumps(good),  # 1
            "{not json",  # 2
            "",  # 3: blank, skipped
            json.dumps({"name": "no user"}),  # 4
            json.dumps({"user": "bad-locale", "locale": "not a locale!"}),  # 5
            json.dumps({"user": "bad-topic", "topics": [{"type": "nope", "topic": "x"}]}),  # 6
            json.dumps({"user": "bad-tag", "tags": {"k": [1]}}),  # 7
            json.dumps({"user": "bad-device", "devices": [{"token": "short", "platform": "IOS"}]}),  # 8
            json.dumps({"user": "ok-2", "name": "fine"}),  # 9
            json.dumps({"user": "bad-tz", "timezone": "Mars/Base"}),  # 10
        ]
    )
    import_id = upload(news, body)
    drain(runtime, news.service)
    got = status(news, import_id)
    assert (got["state"], got["lines_total"], got["lines_done"], got["lines_failed"]) == ("done", 9, 9, 7)
    failed = errors(news, import_id, limit=2)  # several pages
    assert [n for n, _ in failed] == [2, 4, 5, 6, 7, 8, 10]
    reasons = dict(failed)
    assert "not JSON" in reasons[2] and "user: required" in reasons[4] and "locale" in reasons[5]
    assert "nope" in reasons[6] and "'k'" in reasons[7] and "token" in reasons[8] and "timezone" in reasons[10]
    assert [json.loads(x)["user"] for x in export(news).splitlines()] == ["ok-1", "ok-2"]  # a bad line wrote nothing


def test_the_same_file_twice_changes_nothing(news, runtime, st):
    body = lines(*_rich(20))
    upload(news, body)
    drain(runtime, news.service)
    before, counts = tables(runtime, news.service), list(st.topic_subscribers(news.service))
    first_export = export(news)
    second = upload(news, body)
    drain(runtime, news.service)
    assert status(news, second)["lines_failed"] == 0
    assert tables(runtime, news.service) == before  # updated_at included: nothing was rewritten
    assert list(st.topic_subscribers(news.service)) == counts == [("news", "sports", 20)]
    assert export(news) == first_export


def stored_flags(runtime, import_id: str) -> list[int]:
    with runtime.sessions() as s:
        rows = s.execute(
            text("SELECT stored FROM import_chunk WHERE import_id = :i ORDER BY chunk_no"), {"i": import_id}
        )
        return [int(r.stored) for r in rows]


def test_topic_lines_of_existing_users_skip_step_one_and_still_keep_their_bad_lines(news, runtime, st):
    """A chunk of topic lines for users that all exist has nothing for MySQL: it is applied without
    step 1's transaction (the chunk is never marked stored), its bad lines are kept all the same, and
    running it again changes nothing. A topic line for a user that does not exist makes the user, in
    step 1."""
    upload(news, lines(*_rich(3)))
    drain(runtime, news.service)
    body = "\n".join(
        [
            json.dumps({"user": "u-00000", "topics": [{"type": "promo", "topic": "deals"}]}),  # 1
            json.dumps({"user": "u-00001", "topics": [{"type": "promo", "topic": "deals"}]}),  # 2
            json.dumps({"user": "u-00002", "topics": [{"type": "nope", "topic": "x"}]}),  # 3
            "{not json",  # 4
        ]
    )
    import_id = upload(news, body)
    drain(runtime, news.service)
    got = status(news, import_id)
    assert (got["state"], got["lines_done"], got["lines_failed"]) == ("done", 4, 2)
    assert [n for n, _ in errors(news, import_id)] == [3, 4]
    assert stored_flags(runtime, import_id) == [0]  # step 1 skipped
    counts = sorted(st.topic_subscribers(news.service))
    assert counts == [("news", "sports", 3), ("promo", "deals", 2)]
    again = upload(news, body)
    drain(runtime, news.service)
    assert status(news, again)["lines_failed"] == 2 and sorted(st.topic_subscribers(news.service)) == counts
    made = upload(news, lines({"user": "new-1", "topics": [{"type": "promo", "topic": "deals"}]}))
    drain(runtime, news.service)
    assert stored_flags(runtime, made) == [1] and status(news, made)["lines_failed"] == 0
    assert sorted(st.topic_subscribers(news.service)) == [("news", "sports", 3), ("promo", "deals", 3)]


def test_a_file_of_many_chunks(news, runtime, st):
    docs = _rich(3000)
    docs[1234] = {"user": "", "name": "empty id"}
    with runtime.sessions() as s:
        import_id = imports.start_import(
            s, news.service, lines(*docs).encode(), "ndjson", chunk_lines=250, max_line_bytes=65536
        )
        s.commit()
    drain(runtime, news.service)
    assert chunks(runtime, import_id) == (12, 12)
    got = status(news, import_id)
    assert (got["lines_total"], got["lines_done"], got["lines_failed"]) == (3000, 3000, 1)
    assert errors(news, import_id)[0][0] == 1235
    rows = tables(runtime, news.service)
    assert len(rows["user"]) == 2999 and len(rows["device"]) == 2999 and len(rows["user_tag"]) == 4 * 2999
    assert list(st.topic_subscribers(news.service)) == [("news", "sports", 2999)]


def test_csv_rows_of_one_user_add_devices_and_typed_tags(news, runtime):
    t1, t2 = random_token(), random_token()
    body = (
        "user,name,device_token,platform,app_version,country,tag.plan,tag.code@string,tag.at@timestamp,tag.n,topic.news\n"
        f"c-1,Kim,{t1},IOS,5.10,KR,pro,007,2026-12-31T00:00:00Z,3.5,sports|weather\n"
        f"c-1,,{t2},AOS,,,,,,,\n"
        'c-2,"Lee, J",,,,,true,,,,\n'
    )
    import_id = upload(news, body, CSV)
    drain(runtime, news.service)
    assert status(news, import_id)["lines_failed"] == 0, errors(news, import_id)
    c1, c2 = (json.loads(x) for x in export(news).splitlines())
    assert c1["name"] == "Kim" and {d["token"] for d in c1["devices"]} == {t1, t2}
    assert c1["tags"] == {"at": {"timestamp": "2026-12-31T00:00:00Z"}, "code": "007", "n": 3.5, "plan": "pro"}
    assert c1["topics"] == [{"type": "news", "topic": "sports"}, {"type": "news", "topic": "weather"}]
    assert (c2["name"], c2["tags"]) == ("Lee, J", {"plan": True})


def test_a_file_that_is_no_import_is_422_and_keeps_nothing(tenant):
    for body, headers in [
        ("", NDJSON),
        ("name,locale\nx,de\n", CSV),
        ("user,colour\nx,red\n", CSV),
        ("{}", {"Content-Type": "application/json"}),
    ]:
        r = tenant.client.post("/v1/imports", content=body, headers=tenant.headers | headers)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"] == "invalid_input"
    assert tenant.client.get("/v1/imports", headers=tenant.headers).json()["items"] == []


def test_another_services_import_is_404(news, make_tenant, runtime):
    import_id = upload(news, lines({"user": "mine", "name": "secret"}))
    other = make_tenant()
    assert other.client.get(f"/v1/imports/{import_id}", headers=other.headers).status_code == 404
    assert other.client.get(f"/v1/imports/{import_id}/errors", headers=other.headers).status_code == 404
    assert other.client.get("/v1/imports", headers=other.headers).json()["items"] == []
    # a worker of the other service does not take it
    assert imports_sql.claim(runtime.sessions, owner="test", lease_s=30, services=[other.service]) is None
    drain(runtime, news.service)
    assert export(other) == "" and "secret" in export(news)
    mine = news.client.get("/v1/imports", headers=news.headers).json()["items"]
    assert [i["import_id"] for i in mine] == [import_id]
    assert news.client.get("/v1/imports/not-a-uuid-but-36-characters-long-xx", headers=news.headers).status_code == 404


def _asgi(app, headers: dict[str, str], declared: int, chunks: list[bytes]) -> tuple[int, dict[str, Any], int]:
    """One POST /v1/imports straight into the ASGI app: (status, JSON body, body messages pulled)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/imports",
        "raw_path": b"/v1/imports",
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        + [(b"content-length", str(declared).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    pulled = 0
    out: dict[str, Any] = {"body": b""}

    async def receive():
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": chunks[pulled - 1], "more_body": pulled < len(chunks)}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    asyncio.run(asyncio.wait_for(app(scope, receive, send), 30))
    return out["status"], json.loads(out["body"]), pulled


def test_an_oversized_file_is_413_before_credentials(client, app, settings, tenant):
    status_, body, pulled = _asgi(app, NDJSON, settings.import_max_body_bytes + 1, [b"x"])
    assert (status_, body["error"]["code"], pulled) == (413, "request_too_large", 0)
    # Larger than every other route may take, within the import's own limit: accepted.
    padded = b"\n" * (settings.api_max_body_bytes + 10) + b'{"user": "padded"}\n'
    status_, body, _ = _asgi(app, tenant.headers | NDJSON, len(padded), [padded])
    assert status_ == 202, body


def test_export_then_import_into_a_fresh_service_reproduces_it(news, make_tenant, runtime):
    docs = _rich(40)
    docs[3]["tags"]["when"] = {"timestamp": "2026-05-01T10:00:00.5Z"}
    docs[4]["topics"].append({"type": "promo", "topic": "spring sale"})
    docs[5].pop("devices")
    docs[6]["locale"] = None
    upload(news, lines(*docs))
    drain(runtime, news.service)
    first = export(news)
    for fmt, media in (("ndjson", NDJSON), ("csv", CSV)):
        fresh = make_tenant()
        fresh.template("TOPIC", "news")
        fresh.template("TOPIC", "promo")
        import_id = upload(fresh, export(news, fmt), media)
        drain(runtime, fresh.service)
        assert status(fresh, import_id)["lines_failed"] == 0, errors(fresh, import_id)
        assert export(fresh) == first, fmt
        assert export(fresh, "csv") == export(news, "csv")


def test_a_device_imported_for_a_subscribed_user_gets_its_subscriptions(news, runtime, st):
    """Like a registration (subscriptions.on_device_added): a new device of a user who already has
    subscriptions gets their rows; a changed time zone moves the user's slot rows (as PUT /v1/users)."""
    old = news.user("old-1", devices=[(random_token(), "AOS")])
    r = news.client.put(f"/v1/users/{old}/subscriptions/topic/news/a", headers=news.headers)
    assert r.status_code in (200, 201), r.text
    new_token = random_token()
    doc = {"user": "old-1", "timezone": "America/New_York", "devices": [{"token": new_token, "platform": "IOS"}]}
    upload(news, lines(doc))
    drain(runtime, news.service)
    subs = news.client.get(f"/v1/users/{old}/subscriptions", headers=news.headers).json()["items"]
    assert [(s["topic"], s["devices"]) for s in subs] == [("a", 2)]
    rows = [r for r in st.user_rows(old, news.service) if r.device_token == new_token]
    assert len(rows) == 1 and rows[0].target == "a"
    key = news.client.get("/v1/templates/TOPIC/news", headers=news.headers).json()["notification_key"]
    slot_rows = list(
        runtime.cql.execute(
            f"SELECT device_token, zone FROM {runtime.keyspaces.notification}.topic_notification"
            " WHERE slot = 0 AND notification_key = %s AND topic = 'a'",
            (key,),
        )
    )
    assert {r.zone for r in slot_rows} == {"America/New_York"} and len(slot_rows) == 2


def test_a_chunk_taken_over_after_its_mysql_commit_still_copies_subscriptions(news, runtime, st):
    """A worker that died between a chunk's MySQL commit and its Cassandra writes: the next one goes on
    from the chunk's stored ``copies`` (the device no longer looks new by then) and finishes it."""
    old = news.user("old-2", devices=[(random_token(), "AOS")])
    assert news.client.put(f"/v1/users/{old}/subscriptions/topic/news/b", headers=news.headers).status_code == 201
    new_token = random_token()
    import_id = upload(news, lines({"user": "old-2", "devices": [{"token": new_token, "platform": "IOS"}]}))
    dead = imports_sql.claim(runtime.sessions, owner="dies", lease_s=0.001, services=[news.service])
    checked = imports._check(runtime, dead)
    with runtime.sessions.begin() as s:  # step 1 of run_chunk, then the worker "dies"
        copies = imports._store(s, lambda: runtime.statements, news.service, checked, 100)
        imports_sql.mark_stored(s, dead, copies, lease_s=0.001)
    assert copies == [(old, new_token, "IOS")]
    drain(runtime, news.service)  # its lease expired at once: the chunk is redone
    assert chunks(runtime, import_id) == (1, 1)
    subs = news.client.get(f"/v1/users/{old}/subscriptions", headers=news.headers).json()["items"]
    assert [(s["topic"], s["devices"]) for s in subs] == [("b", 2)]
    assert status(news, import_id)["lines_done"] == 1
    with runtime.sessions() as s:
        assert s.execute(text("SELECT attempts FROM import_chunk WHERE import_id = :i"), {"i": import_id}).scalar() == 2


def test_retention_deletes_finished_imports_with_their_chunks_and_errors(news, runtime):
    from notee.usecases import retention

    old = upload(news, "{bad\n")
    drain(runtime, news.service)
    running = upload(news, lines({"user": "later"}))  # not applied: unfinished, kept however old
    with runtime.sessions.begin() as s:
        s.execute(
            text(
                "UPDATE import_job SET created_at = created_at - INTERVAL 40 DAY,"
                " finished_at = finished_at - INTERVAL 40 DAY WHERE import_id IN (:a, :b)"
            ),
            {"a": old, "b": running},
        )
    assert retention.prune_imports(runtime) >= 1
    assert news.client.get(f"/v1/imports/{old}", headers=news.headers).status_code == 404
    assert status(news, running)["state"] == "queued"
    with runtime.sessions() as s:
        for table in ("import_chunk", "import_error"):
            left = s.execute(text(f"SELECT COUNT(*) FROM {table} WHERE import_id = :i"), {"i": old}).scalar_one()
            assert left == 0, table


def test_a_chunk_that_keeps_failing_is_given_up_and_the_import_ends(news, runtime):
    """A poison chunk (claimed MAX_CHUNK_ATTEMPTS times without finishing) does not stop its import:
    its lines are reported failed, the other chunks are applied."""
    with runtime.sessions() as s:
        body = lines(*({"user": f"p-{i}"} for i in range(6))).encode()
        import_id = imports.start_import(s, news.service, body, "ndjson", chunk_lines=3, max_line_bytes=65536)
        s.execute(
            text("UPDATE import_chunk SET attempts = :n WHERE import_id = :i AND chunk_no = 0"),
            {"n": imports_sql.MAX_CHUNK_ATTEMPTS, "i": import_id},
        )
        s.commit()
    drain(runtime, news.service)  # the other chunk; the poison one is given up in the claim
    assert chunks(runtime, import_id) == (2, 2)
    got = status(news, import_id)
    assert (got["state"], got["lines_done"], got["lines_failed"]) == ("done", 6, 3)
    assert [n for n, r in errors(news, import_id) if r == imports_sql.GAVE_UP] == [1, 2, 3]
    assert [json.loads(x)["user"] for x in export(news).splitlines()] == ["p-3", "p-4", "p-5"]


def test_a_chunk_given_back_after_a_failure_is_claimed_again_at_once(news, runtime):
    import_id = upload(news, lines({"user": "again"}))
    first = imports_sql.claim(runtime.sessions, owner="fails", lease_s=300, services=[news.service])
    assert imports_sql.claim(runtime.sessions, owner="other", lease_s=300, services=[news.service]) is None  # leased
    imports_sql.release(runtime.sessions, first, counts=False)  # an outage: not an attempt
    second = imports_sql.claim(runtime.sessions, owner="other", lease_s=300, services=[news.service])
    assert second is not None and (second.import_id, second.chunk_no) == (import_id, first.chunk_no)
    with runtime.sessions() as s:
        attempts = s.execute(text("SELECT attempts FROM import_chunk WHERE import_id = :i"), {"i": import_id})
        assert attempts.scalar_one() == 1
    imports_sql.release(runtime.sessions, first)  # the stale holder's give-back changes nothing
    with pytest.raises(imports_sql.LeaseLost):
        imports.run_chunk(runtime, first)  # its lease is gone: its writes are refused
    imports.run_chunk(runtime, second)
    got = status(news, import_id)
    assert (got["state"], got["lines_done"]) == ("done", 1)


def test_a_file_of_several_megabytes_is_kept_as_chunks(news, runtime, settings):
    n = 20_000
    body = lines(*({"user": f"m-{i:06d}", "name": "x" * 200} for i in range(n))).encode()
    assert settings.api_max_body_bytes < len(body) < settings.import_max_body_bytes
    import_id = upload(news, body)
    got = status(news, import_id)
    assert (got["state"], got["lines_total"]) == ("queued", n)
    with runtime.sessions() as s:
        counts = s.execute(
            text(
                "SELECT COUNT(*), SUM(line_count), MIN(first_line), MAX(last_line) FROM import_chunk WHERE import_id = :i"
            ),
            {"i": import_id},
        ).one()
    assert tuple(counts) == (n // settings.import_chunk_lines, n, 1, n)
    with runtime.sessions.begin() as s:  # not applied: no worker of another test should take it up
        s.execute(text("DELETE FROM import_job WHERE import_id = :i"), {"i": import_id})


def test_a_user_deleted_while_its_device_line_is_applied_leaves_no_orphan_device(news, runtime):
    # The chunk's device and tag rows skip the foreign-key check (import_rows_sql.parents_locked), so
    # the chunk must hold every existing user it writes for locked: here the user's deletion holds the
    # row; the chunk's lock waits for it, then finds the user gone and makes it anew with the device.
    service = news.service
    upload(news, lines({"user": "gone", "devices": [{"token": random_token("AOS"), "platform": "AOS"}]}))
    drain(runtime, service)
    upload(news, lines({"user": "gone", "devices": [{"token": random_token("AOS"), "platform": "AOS"}]}))
    claim = imports_sql.claim(runtime.sessions, owner="test", lease_s=60, services=[service])
    assert claim is not None
    with runtime.sessions() as deleter, ThreadPoolExecutor(1) as pool:
        deleter.execute(text("DELETE FROM `user` WHERE service = :s AND service_user_id = 'gone'"), {"s": service})
        applied = pool.submit(imports.run_chunk, runtime, claim)

        wait_for(
            lambda: running(runtime, f"%{service}%FOR UPDATE%"),
            timeout=30,
            what="the chunk waiting for the deleted user's lock",
        )
        deleter.commit()
        applied.result(timeout=60)
    with runtime.sessions() as s:
        orphans = s.execute(
            text(
                "SELECT COUNT(*) FROM device d WHERE d.service = :s AND NOT EXISTS"
                " (SELECT 1 FROM `user` u WHERE u.service = d.service AND u.user_id = d.user_id)"
            ),
            {"s": service},
        ).scalar_one()
        devices = s.execute(
            text(
                "SELECT COUNT(*) FROM device d JOIN `user` u ON u.service = d.service AND u.user_id = d.user_id"
                " WHERE d.service = :s AND u.service_user_id = 'gone'"
            ),
            {"s": service},
        ).scalar_one()
    assert (orphans, devices) == (0, 1)
