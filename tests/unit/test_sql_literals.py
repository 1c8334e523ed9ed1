"""notee/store/sql_literals.py renders strings exactly as PyMySQL's own escaping does (the statements
it builds are sent without parameters, so a difference would change or break what is written)."""

from __future__ import annotations

import random

from pymysql.converters import escape_string

from notee.store.sql_literals import backslashed, quotes_doubled

SPECIAL = ["\\", "\x00", "\n", "\r", "\x1a", "'", '"', "%", "a", "한", " "]


def test_backslashed_is_pymysqls_escape_string_for_every_mix_of_its_special_characters() -> None:
    rng = random.Random(30)
    for _ in range(5000):
        value = "".join(rng.choice(SPECIAL) for _ in range(rng.randint(0, 12)))
        assert backslashed(value) == "'" + escape_string(value) + "'", repr(value)


def test_quotes_doubled_changes_only_the_quote() -> None:
    assert quotes_doubled('it\'s \\ "x"\n') == "'it''s \\ \"x\"\n'"
