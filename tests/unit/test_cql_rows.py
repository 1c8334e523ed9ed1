"""The index rows' ``data`` text (notee/store/cql/rows.py): rendered directly for the usual types, it
is exactly what ``json.dumps`` of the same dict writes, so rows written before and after read alike."""

from __future__ import annotations

import json

import pytest

from notee.store.cql.rows import device_data, user_level_data

KEYS = ["0b7e6f0c-6a4e-4b4a-9a51-5b8f1d0e2c11", 'q"uote\\back', "ключ", "tab\there", ""]


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize(
    ("slot", "no", "os_", "at"), [(0, 0, "AOS", 0), (33, 1_000_123, "IOS", 1764900000000), (-1, 5, "WEB", 7)]
)
def test_device_data_is_what_json_dumps_writes(key: str, slot: int, no: int, os_: str, at: int) -> None:
    expected = json.dumps({"key": key, "slot": slot, "no": no, "os": os_, "at": at})
    assert device_data(key, slot, no, os_, at) == expected
    assert json.loads(device_data(key, slot, no, os_, at)) == {"key": key, "slot": slot, "no": no, "os": os_, "at": at}


def test_device_data_with_an_origin_or_other_types_takes_the_encoder() -> None:
    assert device_data("k", 1, 2, "AOS", 3, "first") == json.dumps(
        {"key": "k", "slot": 1, "no": 2, "os": "AOS", "at": 3, "origin": "first"}
    )
    assert device_data("k", 1, 2, "AOS", True) == json.dumps({"key": "k", "slot": 1, "no": 2, "os": "AOS", "at": True})


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("at", [0, 1764900000000, True])
def test_user_level_data_is_what_json_dumps_writes(key: str, at: int) -> None:
    assert user_level_data(key, at) == json.dumps({"key": key, "at": at})
