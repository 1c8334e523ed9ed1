"""SQL literals rendered by Notee, for the bulk statements it sends without parameters (an import's
multi-row upserts and chunks, IN lists of 1,000 ids): there, SQLAlchemy's parameters and PyMySQL's
escaping of each value cost more CPU than the server's work (docs/BENCHMARKS.md,
"import_users_per_s"). A value comes out exactly as PyMySQL renders a parameter."""

from __future__ import annotations

from typing import Any

from pymysql.constants.SERVER_STATUS import SERVER_STATUS_NO_BACKSLASH_ESCAPES
from pymysql.converters import escape_item
from sqlalchemy import Connection


class Literals:
    """SQL literals of values as PyMySQL renders a query's parameters, following the session's
    NO_BACKSLASH_ESCAPES as PyMySQL does (the server reports it in every reply's status; under it a
    quote is doubled, nothing else changes). ``string`` renders a string and ``other`` any other
    value, each distinct value once (an import chunk's user id is on its user, device and tag rows;
    tag keys, values and ``now`` repeat on many rows); ``quote`` renders a string every time (a
    value seen once: no memory kept for it); ``text`` too, escaping only what the server's lexer
    needs (a long text full of ``"``, an import chunk's lines: the same value, a cheaper literal)."""

    def __init__(self, conn: Connection) -> None:
        status = getattr(conn.connection.dbapi_connection, "server_status", 0)
        no_backslashes = status & SERVER_STATUS_NO_BACKSLASH_ESCAPES
        self.quote = quotes_doubled if no_backslashes else backslashed
        self.text = quotes_doubled if no_backslashes else lexer_escaped
        self._strings: dict[str, str] = {}
        self._seen: dict[tuple[type, Any], str] = {}

    def string(self, value: str) -> str:
        text_ = self._strings.get(value)
        if text_ is None:
            text_ = self._strings[value] = self.quote(value)
        return text_

    def other(self, value: Any) -> str:
        key = (value.__class__, value)
        text_ = self._seen.get(key)
        if text_ is None:
            text_ = self._seen[key] = str(escape_item(value, "utf8mb4"))
        return text_


def backslashed(value: str) -> str:
    # PyMySQL's escape_string (str.translate over its table), as replaces: the same text, and far
    # cheaper on a string without those characters (nearly every one).
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    for char, escaped in _ESCAPES:
        if char in value:
            value = value.replace(char, escaped)
    return "'" + value + "'"


_ESCAPES = (("\0", "\\0"), ("\n", "\\n"), ("\r", "\\r"), ("\032", "\\Z"), ("'", "\\'"), ('"', '\\"'))


def quotes_doubled(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def lexer_escaped(value: str) -> str:
    # Inside '...' the server's lexer (backslash escapes on) reads every character as itself but a
    # backslash and the quote; NUL is escaped too, as PyMySQL does. A `"` needs nothing: PyMySQL's
    # `\"` for it costs a replace over a chunk of NDJSON lines, each full of them.
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    if "'" in value:
        value = value.replace("'", "\\'")
    if "\0" in value:
        value = value.replace("\0", "\\0")
    return "'" + value + "'"
