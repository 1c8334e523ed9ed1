"""The lines of a bulk import (notee/domain/import_lines.py): splitting an upload into numbered records,
checking a record with the API's own rules, CSV typing; the app version key; the CLI's progress bar."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from notee.cli.remote_imports import ProgressBar
from notee.core.errors import InvalidInput
from notee.domain.import_lines import LineRejected, LineRules, check_record, split_upload
from notee.domain.versions import version_key

RULES = LineRules(frozenset({"news"}), 3)


def _check(raw: str, fmt: str = "ndjson", header: list[str] | None = None, rules: LineRules = RULES):
    return check_record(fmt, header, (7, raw if fmt == "ndjson" else raw.split(",")), rules)


def test_ndjson_lines_keep_the_files_numbers_and_blank_lines_are_skipped():
    up = split_upload(b'{"user": "a"}\n\n  \n{"user": "b"}\n' + b"x" * 2000 + b"\n\xff\n", "ndjson", 1024)
    assert [n for n, _ in up.records] == [1, 4]
    assert [n for n, _ in up.failed] == [5, 6] and "longer than 1024" in up.failed[0][1]


def test_a_csv_record_spanning_lines_is_numbered_by_its_first():
    up = split_upload(b'user,name\na,"two\nlines"\nb,x\n', "csv", 1024)
    assert up.header == ["user", "name"] and up.records == [(2, ["a", "two\nlines"]), (4, ["b", "x"])]


@pytest.mark.parametrize(
    "body,fmt",
    [(b"", "ndjson"), (b"\n\n", "ndjson"), (b"name\nx\n", "csv"), (b"user,colour\n", "csv"), (b"user,user\n", "csv")],
)
def test_a_file_that_is_no_import_is_refused_whole(body, fmt):
    with pytest.raises(InvalidInput):
        split_upload(body, fmt, 1024)


def test_a_good_line_is_checked_with_the_apis_rules():
    line = _check(
        json.dumps(
            {
                "user": "u",
                "name": "N",
                "locale": "pt-br",
                "timezone": None,
                "tags": {"a": 1, "gone": None},
                "devices": [{"token": "t" * 10, "platform": "IOS", "app_version": "5.10", "country": "KR"}],
                "topics": [{"type": "news", "topic": "x"}],
            }
        )
    )
    assert line.profile == {"service_user_name": "N", "locale": "pt-BR", "timezone": None}
    assert line.tags is not None and set(line.tags.set) == {"a"} and line.tags.remove == {"gone"}
    assert line.devices[0].app_version_key == "00005.00010" and line.topics == [("news", "x")]


@pytest.mark.parametrize(
    "doc,reason",
    [
        ("[1]", "a JSON object"),
        ('{"user": "u", "colour": 1}', "unknown field 'colour'"),
        ('{"user": ""}', "user"),
        ('{"user": "u", "devices": [{"token": "tttttttttt"}]}', "token and platform"),
        ('{"user": "u", "devices": [{"token": "tttttttttt", "platform": "WIN"}]}', "devices[0].platform"),
        ('{"user": "u", "devices": [{"token": "tttttttttt", "platform": "AOS", "app_version": "5 2"}]}', "app_version"),
        ('{"user": "u", "topics": [{"type": "promo", "topic": "x"}]}', "no TOPIC template 'promo'"),
        ('{"user": "u", "topics": [{"type": "news", "topic": ""}]}', "topics[0].topic"),
        ('{"user": "u", "tags": {"a": 1, "b": 2, "c": 3, "d": 4}}', "at most 3 tags"),
        ('{"user": "u", "tags": {"bad key": 1}}', "tag key"),
        ("[" * 5000, "not JSON"),
    ],
)
def test_a_bad_line_says_why(doc, reason):
    with pytest.raises(LineRejected) as caught:
        _check(doc)
    assert reason in caught.value.reason


def test_csv_cells_are_typed_by_their_column_and_empty_cells_are_left_out():
    header = [
        "user",
        "name",
        "device_token",
        "platform",
        "tag.n",
        "tag.b",
        "tag.s@string",
        "tag.t@timestamp",
        "topic.news",
    ]
    line = _check(
        "u,,tttttttttt,AOS,4.5,true,007,2026-01-01T00:00:00Z,a|b", "csv", header, LineRules(RULES.topic_types, 10)
    )
    assert "service_user_name" not in line.profile
    stored = {k: (v.kind, v.value_str, v.value_num) for k, v in line.tags.set.items()}
    assert stored == {
        "n": ("n", None, 4.5),
        "b": ("b", None, 1.0),
        "s": ("s", "007", None),
        "t": ("t", None, 1767225600.0),
    }
    assert line.topics == [("news", "a"), ("news", "b")] and line.devices[0].region is None


def test_an_app_version_is_stored_with_the_registrations_key():
    line = _check('{"user": "u", "devices": [{"token": "tttttttttt", "platform": "AOS", "app_version": "5.2.1-beta"}]}')
    assert line.devices[0].app_version_key == version_key("5.2.1-beta") and line.devices[0].app_version_given
    cleared = _check('{"user": "u", "devices": [{"token": "tttttttttt", "platform": "AOS", "app_version": null}]}')
    assert cleared.devices[0].app_version_given and cleared.devices[0].app_version is None


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _import(done: int, failed: int = 0, state: str = "running"):
    return SimpleNamespace(state=state, lines_total=200, lines_done=done, lines_failed=failed)


def test_the_progress_bar_redraws_on_a_terminal_and_writes_lines_elsewhere():
    tty = _Tty()
    bar = ProgressBar(tty)
    bar.update(_import(50))
    bar.update(_import(200, 1, "done"))
    bar.close()
    out = tty.getvalue()
    assert out.count("\r\x1b[2K") == 2 and "[" + "#" * 8 in out and "100% 200/200 lines · failed 1" in out
    plain = io.StringIO()
    bar = ProgressBar(plain)
    bar.update(_import(50))
    bar.update(_import(200, 0, "done"))
    assert [x.split(" · ")[0] for x in plain.getvalue().splitlines()] == [
        "running: 50/200 lines",
        "done: 200/200 lines",
    ]


def test_chunks_hold_at_most_their_lines_and_about_four_mebibytes():
    from notee.usecases.imports import CHUNK_MAX_BYTES, _chunks

    small = [(n, "x" * 10) for n in range(1, 8)]
    assert [len(c) for c in _chunks(small, 3)] == [3, 3, 1]
    big = [(n, "x" * 60_000) for n in range(1, 201)]
    chunks = _chunks(big, 1000)
    assert sum(len(c) for c in chunks) == 200 and len(chunks) == 3
    assert all(sum(len(r) for _, r in c) <= CHUNK_MAX_BYTES for c in chunks)
    assert [c[0][0] for c in chunks] == [1, 70, 139]  # in order, none lost
