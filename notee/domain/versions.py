"""App versions, pure: the rule of a device's ``app_version`` and its sortable key (docs/AUDIENCES.md
"Built-in attributes"), so that comparing two versions is comparing two strings (in SQL too).

The key of a release is its numeric parts, each zero-padded to 5 digits, joined by dots: ``5.2`` ->
``00005.00002``, ``5.10.1`` -> ``00005.00010.00001`` (so ``5.10 > 5.9``). Trailing zero parts are
dropped (``5.2.0`` and ``5.2`` are one version: ``00005.00002``). A part over 99999 counts as 99999.

A pre-release (``5.2.1-beta``, ``5.2.1rc1``: whatever follows the numeric parts, but for a ``+build``
suffix, which is ignored) sorts after every release before its own and before its own release, as
in SemVer: its key is the release's minus one in its last part, then ``.99999~`` and the suffix
with its numeric identifiers padded too (``5.2.1-beta.2`` -> ``00005.00002.00000.99999~beta.00002``):
``5.2.0.99999 < 5.2.1-beta.2 < 5.2.1-beta.10 < 5.2.1-rc < 5.2.1``. A version without a leading
number is taken as a pre-release of ``0``: ``!`` and its text, before every numbered one.
"""

from __future__ import annotations

import re
from functools import lru_cache

APP_VERSION_PATTERN = r"^[0-9A-Za-z.+-]{1,32}$"
APP_VERSION_RE = re.compile(APP_VERSION_PATTERN)
KEY_MAX_LEN = 100  # device.app_version_key's width
_PART_MAX = 99999
_CORE = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_IDENTIFIER = re.compile(r"[0-9A-Za-z]+")


def _pad(number: str) -> str:
    return f"{min(int(number), _PART_MAX):05d}"


def _suffix_key(suffix: str) -> str:
    """A pre-release's identifiers, numeric ones padded like the parts (``beta.2`` -> ``beta.00002``)."""
    return ".".join(_pad(i) if i.isdigit() else i for i in _IDENTIFIER.findall(suffix))


@lru_cache(maxsize=4096)  # an import checks the same few versions on thousands of devices
def version_key(text: str) -> str:
    """The sortable key of an app version (``text`` matches ``APP_VERSION_PATTERN``)."""
    text = text.split("+", 1)[0]  # build metadata: not part of the order
    core = _CORE.match(text)
    suffix = text[core.end() :] if core else text
    numbers = [min(int(p), _PART_MAX) for p in core.group().split(".")] if core else [0]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    pre = _suffix_key(suffix)
    if not pre:
        key = ".".join(f"{n:05d}" for n in numbers)
    elif numbers == [0]:
        key = "!" + pre
    else:
        numbers[-1] -= 1
        key = ".".join(f"{n:05d}" for n in numbers) + f".{_PART_MAX}~" + pre
    return key[:KEY_MAX_LEN]
