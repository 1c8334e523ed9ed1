"""The notification id every push carries (docs/PAYLOADS.md "Notification id", docs/ENGAGEMENT.md).

``<source>.<device>``: ``source`` is the job id without dashes (32 hex), or a single send's id
(``s`` + 31 hex); ``device`` is 11 characters of base64url, the first 8 bytes of BLAKE2b of the
device token (a pseudonym: the token cannot be read back from it). 44 characters in all. The app
echoes it in ``POST /v1/receipts``; Notee finds the job (and its service) from ``source`` and counts
each (notification id, event) once.

The one home of the id: ``stamp`` puts it in a payload's custom data (FCM ``data``, the APNs
top-level custom keys, and Web Push's ``data``), under ``KEY``.
"""

from __future__ import annotations

import binascii
import hashlib
import re
import secrets
from collections.abc import Mapping
from typing import Any

KEY = "notee_id"  # the data key / custom key the id travels under
DEVICE_CHARS = 11
SOURCE_CHARS = 32
MAX_LEN = SOURCE_CHARS + 1 + DEVICE_CHARS
PATTERN = r"^[0-9a-fs][0-9a-f]{31}\.[A-Za-z0-9_-]{11}$"
_RE = re.compile(PATTERN)
SAMPLE = "0" * SOURCE_CHARS + "." + "A" * DEVICE_CHARS  # what payload sizes are measured with


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def device_part(token: str) -> str:
    """Base64url of the first 8 bytes of BLAKE2b of ``token``, unpadded (11 characters): per push on
    the worker's hot path, so straight through ``binascii`` (``base64.urlsafe_b64encode`` is two
    Python calls and a translate around the same)."""
    digest = hashlib.blake2b(token.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return binascii.b2a_base64(digest, newline=False)[:DEVICE_CHARS].translate(_URLSAFE).decode("ascii")


def source_of_job(job_id: str) -> str:
    return job_id.replace("-", "")


def job_id_of(source: str) -> str | None:
    """The job id (with dashes) of a job's source; None for a single send's."""
    if source.startswith("s"):
        return None
    s = source
    return f"{s[:8]}-{s[8:12]}-{s[12:16]}-{s[16:20]}-{s[20:]}"


def new_single_source() -> str:
    return "s" + secrets.token_hex(16)[:31]


def make(source: str, token: str) -> str:
    return f"{source}.{device_part(token)}"


def parse(nid: str) -> tuple[str, str] | None:
    """``(source, device)`` of a well-formed id, else None."""
    if not _RE.match(nid):
        return None
    source, _, device = nid.partition(".")
    return source, device


def stamp(data: Mapping[str, Any], nid: str) -> dict[str, Any]:
    """``data`` with the id under ``KEY`` (it replaces a key of that name: the id is Notee's)."""
    out = dict(data)
    if nid:
        out[KEY] = nid
    return out
