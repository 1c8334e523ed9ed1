"""`notee user tags|tag|untag`: a user's tags over HTTP (NOTEE_API_KEY; docs/API.md "Tags").

On the command line a tag is ``KEY=VALUE``, its value typed by a prefix: ``n:31`` a number,
``b:true`` a boolean, ``t:2026-01-01T00:00:00Z`` a timestamp (RFC 3339 with its offset),
``s:...`` a string that itself begins with one of these prefixes; anything else is a string.
"""

from __future__ import annotations

import math
from typing import Any

import typer

from notee.cli.remote_client import USER_HELP, AsJson, ExitCode, fail, print_json, say, sdk_client
from notee.cli.remote_tenant import user_app

TAG_HELP = (
    "KEY=VALUE; VALUE typed by a prefix: n:31 (number), b:true (boolean), t:2026-01-01T00:00:00Z "
    "(timestamp), s:text (string); else a string."
)


def tag_value(text: str) -> Any:
    """A tag's value as the command line writes it (see the module's docstring), as the API's JSON."""
    kind, sep, rest = text.partition(":")
    if not sep or kind not in ("n", "b", "t", "s"):
        return text
    if kind == "s":
        return rest
    if kind == "t":
        return {"timestamp": rest}
    if kind == "b":
        if rest.lower() not in ("true", "false"):
            fail(f"{text!r}: a boolean is b:true or b:false", ExitCode.INVALID)
        return rest.lower() == "true"
    try:
        number: int | float = int(rest)
    except ValueError:
        try:
            number = float(rest)
        except ValueError:
            number = math.nan
    if not math.isfinite(number):
        fail(f"{text!r}: a number is n: and a finite number, e.g. n:31 or n:4.5", ExitCode.INVALID)
    return number


def tag_pairs(items: list[str]) -> dict[str, Any]:
    """``["plan=pro", "age=n:31"]`` as the API's tags."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"{item!r} is not KEY=VALUE", ExitCode.INVALID)
        out[key] = tag_value(value)
    return out


@user_app.command("tags")
def user_tags(user: str = typer.Argument(..., help=USER_HELP)) -> None:
    """The user's tags, as one JSON object ``{"user_id", "tags"}``."""
    with sdk_client() as notee:
        print_json(notee.get_tags(user))


@user_app.command("tag")
def user_tag(
    user: str = typer.Argument(..., help=USER_HELP),
    tags: list[str] = typer.Argument(..., help=TAG_HELP),
    as_json: AsJson = False,
) -> None:
    """Set tags of a user (the others stay): `notee user tag ext:alice plan=pro age=n:31 beta=b:true`."""
    patch = tag_pairs(tags)
    with sdk_client() as notee:
        answer = notee.patch_tags(user, patch)
    say(f"{len(patch)} tag(s) set; the user holds {len(answer.tags)}", answer, as_json)


@user_app.command("untag")
def user_untag(
    user: str = typer.Argument(..., help=USER_HELP),
    keys: list[str] = typer.Argument(..., help="The keys to remove (a key the user does not hold is no error)."),
    as_json: AsJson = False,
) -> None:
    """Remove tags of a user, in one request."""
    with sdk_client() as notee:
        answer = notee.patch_tags(user, dict.fromkeys(keys))
    say(f"{len(set(keys))} tag(s) removed; the user holds {len(answer.tags)}", answer, as_json)
