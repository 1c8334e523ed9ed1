"""Pure schedule/topic validation: table-driven, no stores."""

from __future__ import annotations

import re
import unicodedata

import pytest

from notee.core.errors import InvalidInput
from notee.domain.schedule import make_schedule, parse_canonical, topic_pattern, validate_timezone, validate_topic


@pytest.mark.parametrize(
    "days,hour,minute,tz,canonical",
    [
        (["MON"], 0, 0, "Asia/Seoul", "MON 00:00 Asia/Seoul"),
        (["wed", "MON", "mon"], 22, 5, "Asia/Seoul", "MON,WED 22:05 Asia/Seoul"),
        (
            ["SUN", "SAT", "FRI", "THU", "WED", "TUE", "MON"],
            23,
            59,
            "America/New_York",
            "MON,TUE,WED,THU,FRI,SAT,SUN 23:59 America/New_York",
        ),
        ([" fri "], 7, 30, "UTC", "FRI 07:30 UTC"),
    ],
)
def test_canonical_schedule(days, hour, minute, tz, canonical):
    s = make_schedule(days, hour, minute, tz)
    assert s.canonical == canonical
    assert parse_canonical(canonical) == s


@pytest.mark.parametrize(
    "days,hour,minute,tz,bad_fields",
    [
        (["MON"], 24, 0, "Asia/Seoul", {"hour"}),
        (["MON"], -1, 0, "Asia/Seoul", {"hour"}),
        (["MON"], 0, 60, "Asia/Seoul", {"minute"}),
        (["FUN"], 0, 0, "Asia/Seoul", {"days"}),
        (["MONDAY"], 0, 0, "Asia/Seoul", {"days"}),
        ([], 0, 0, "Asia/Seoul", {"days"}),
        (["MON"], 0, 0, "Mars/Olympus", {"timezone"}),
        (["MON"], 0, 0, "", {"timezone"}),
        (["MON"], True, 0, "UTC", {"hour"}),
        (["XXX"], 24, 60, "Nowhere", {"days", "hour", "minute", "timezone"}),
    ],
)
def test_invalid_schedule(days, hour, minute, tz, bad_fields):
    with pytest.raises(InvalidInput) as err:
        make_schedule(days, hour, minute, tz)
    assert {d["field"] for d in err.value.details} == bad_fields


@pytest.mark.parametrize(
    "topic,ok",
    [
        ("news", True),
        ("x" * 50, True),
        ("한국어-토픽", True),
        ("x" * 51, False),
        ("", False),
        ("   ", False),
        ("bad\nline", False),
        ("tab\tchar", False),
        ("nul\x00", False),
        ("zero\u200bwidth", False),
    ],
)
def test_topic(topic, ok):
    if ok:
        assert validate_topic(topic) == topic
    else:
        with pytest.raises(InvalidInput):
            validate_topic(topic)


def test_the_documented_topic_pattern_is_validate_topic():
    """``topic_pattern`` (the OpenAPI document's) refuses exactly what validate_topic refuses, every
    code point but the lone surrogates it cannot name: a Python with a newer Unicode fails here until
    the pattern's list of control and format characters is brought up to date."""
    pattern = re.compile(topic_pattern())
    for code in range(0x110000):
        ch = chr(code)
        category = unicodedata.category(ch)
        if category != "Cs":
            assert bool(pattern.fullmatch(ch)) == (category not in ("Cc", "Cf") and bool(ch.strip())), hex(code)
    for topic in (" a", "a ", "\u3000x\u3000", "스포츠 news", "a" * 50, "a/b"):
        assert pattern.fullmatch(topic) and validate_topic(topic) == topic
    for topic in (" ", "\u2028\u3000", "a\u200bb", "a\nb", "a\U000e0041"):
        assert not pattern.fullmatch(topic)
        with pytest.raises(InvalidInput):
            validate_topic(topic)
    assert not re.fullmatch(topic_pattern("/"), "a/b")


def test_timezone():
    assert validate_timezone("Europe/Berlin") == "Europe/Berlin"
    with pytest.raises(InvalidInput):
        validate_timezone("Europe/Atlantis")


def test_parse_canonical_rejects_garbage():
    for text in ("", "MON", "MON 25:00 UTC", "MON 10:00 ", "XYZ 10:00 UTC"):
        with pytest.raises(ValueError):
            parse_canonical(text)


def test_parse_canonical_keeps_a_zone_this_host_does_not_know():
    """Stored rows must stay readable (and deletable) on a host whose tzdata lacks their zone."""
    parsed = parse_canonical("MON,FRI 10:05 Nowhere/X")
    assert (parsed.days, parsed.hour, parsed.minute, parsed.timezone) == (("MON", "FRI"), 10, 5, "Nowhere/X")
