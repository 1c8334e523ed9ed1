"""notee.domain.versions: an app version's sortable key (docs/AUDIENCES.md "Built-in attributes")."""

from __future__ import annotations

import re

import pytest

from notee.domain.versions import APP_VERSION_PATTERN, KEY_MAX_LEN, version_key


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("5.2", "00005.00002"),
        ("5.10.1", "00005.00010.00001"),
        ("5", "00005"),
        ("0", "00000"),
        ("5.2.0", "00005.00002"),  # trailing zero parts: the same version
        ("5.0.0", "00005"),
        ("0.0", "00000"),
        ("5.0.1", "00005.00000.00001"),
        ("007.02", "00007.00002"),
        ("123456.1", "99999.00001"),  # a part over 99999 counts as 99999
        ("5.2.1+build.7", "00005.00002.00001"),  # build metadata: ignored
        ("5.2.1-beta", "00005.00002.00000.99999~beta"),
        ("5.2.1-beta.2", "00005.00002.00000.99999~beta.00002"),
        ("5.2.1rc1", "00005.00002.00000.99999~rc1"),
        ("5.0-beta", "00004.99999~beta"),
        ("0-beta", "!beta"),
        ("beta", "!beta"),
    ],
)
def test_keys(text: str, key: str) -> None:
    assert re.fullmatch(APP_VERSION_PATTERN, text)
    assert version_key(text) == key


# Each strictly before the next, as SemVer orders them (and 5.10 after 5.9).
ORDERED = [
    "alpha",
    "0",
    "0.1-beta",
    "0.1",
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1",
    "1.9",
    "1.10",
    "2.0.0.99999",
    "2.1-beta",
    "2.1",
    "2.1.0.1",
    "5.2",
    "5.2.1-beta",
    "5.2.1",
    "5.9",
    "5.10",
    "10",
]


def test_keys_sort_as_versions() -> None:
    keys = [version_key(v) for v in ORDERED]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)


def test_equal_versions_have_equal_keys() -> None:
    assert version_key("5.2") == version_key("5.2.0") == version_key("5.2.0+b1") == version_key("5.2.0.0")


def test_the_key_fits_its_column() -> None:
    longest = "1.1.1.1.1.1.1.1-1.1.1.1.1.1.1.1"
    assert re.fullmatch(APP_VERSION_PATTERN, longest)
    assert len(version_key(longest)) <= KEY_MAX_LEN
    assert len(version_key("1." * 15 + "1")) <= KEY_MAX_LEN


@pytest.mark.parametrize("text", ["", "x" * 33, "5.2 beta", "5.2_1", "5.2/1", "é"])
def test_the_pattern_refuses(text: str) -> None:
    assert not re.fullmatch(APP_VERSION_PATTERN, text)
