"""Where a JSON body can be cut around a string value without decoding it: the personas' bodies
differ per device only in such strings (the token, Notee's notification id), so what is decided of
a body is decided once per body with those strings cut out (``notee.emulator.fcm_bodies``,
``notee.emulator.apns``)."""

from __future__ import annotations


def plain(raw: bytes) -> str | None:
    """``raw`` as a JSON string's content that needs no escape, else None."""
    if b"\\" in raw or b'"' in raw:
        return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def string_at(body: bytes, key: bytes, start: int) -> tuple[int, int] | None:
    """Where the string value of the first ``key`` from ``start`` is: (after its opening quote, at
    its closing quote)."""
    at = body.find(key, start)
    if at < 0:
        return None
    at += len(key)
    if body[at : at + 1] == b" ":  # json.dumps's default separator (firebase-admin's bodies)
        at += 1
    if body[at : at + 1] != b'"':
        return None
    end = body.find(b'"', at + 1)
    return None if end < 0 else (at + 1, end)
