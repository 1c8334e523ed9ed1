"""estimate_s: seconds of a filter estimate (``POST /v1/audience/estimate``'s use case,
``notee.usecases.estimate.estimate``) over a service of ``users`` users with tags and a device each
(bench/audience_data.py, loaded once per size). Goal < 2 s at 1,000,000 users (issue 30).

The figure's filter is a tag equality ANDed with a device attribute (``plan = pro`` and
``platform = AOS``), the shape most estimates take. Each filter is estimated ``repeats`` times after
one warm-up (the buffer pool holds the service's rows, as it would on a server answering estimates);
the median is its time, and its counts are checked against what the population holds. Other shapes
are side figures in ``extra`` (seconds each): a group ORed with an attribute, a negation (users
without a tag match too), a device attribute alone, a user attribute with a number tag.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.audience_data import REGIONS, load_users, plan_of
from bench.report import Measure, figure

PRO_AOS = [[{"tag": "plan", "op": "=", "value": "pro"}, {"attribute": "platform", "op": "=", "value": "AOS"}]]
SIDE: dict[str, tuple[list[Any], Callable[[int], bool]]] = {
    "pro_or_kr_s": (
        [[{"tag": "plan", "op": "=", "value": "pro"}], [{"attribute": "country", "op": "in", "value": ["KR"]}]],
        lambda i: plan_of(i) == "pro" or REGIONS[i % 4] == "KR",
    ),
    "not_beta_s": ([[{"tag": "beta", "op": "!=", "value": True}]], lambda i: i % 20 != 0),
    "app_version_s": ([[{"attribute": "app_version", "op": ">=", "value": "5.10"}]], lambda i: i % 12 >= 10),
    "ko_score_s": (
        [[{"attribute": "locale", "op": "=", "value": "ko-KR"}, {"tag": "score", "op": ">=", "value": 90}]],
        lambda i: i % 2 == 1 and i % 100 >= 90,
    ),
}


def _timed(runtime: Any, service: str, filter_: list[Any], repeats: int) -> tuple[float, Any]:
    from notee.usecases.estimate import EstimateTarget, estimate

    target = EstimateTarget(filter=filter_)
    times, found = [], None
    for _ in range(repeats + 1):  # the first is the warm-up
        with runtime.sessions() as session:
            t0 = time.perf_counter()
            found = estimate(session, runtime.statements, service, target)
            times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]), found


def _check(found: Any, n: int, matches: Callable[[int], bool], what: str) -> None:
    expected = sum(1 for i in range(n) if matches(i))
    if found.users != expected or found.devices != expected:  # one device per user
        raise AssertionError(
            f"{what}: counted {found.users} users / {found.devices} devices, population has {expected}"
        )


def run(runtime: Any, users: int = 1_000_000, repeats: int = 3, service: str | None = None) -> dict[str, Any]:
    """The figure; ``service``: load into this one (default: the size's own, reused across runs)."""
    loaded = load_users(runtime, users, service)
    service = loaded["service"]
    seconds, found = _timed(runtime, service, PRO_AOS, repeats)
    _check(found, users, lambda i: plan_of(i) == "pro" and i % 3 != 0, "plan = pro AND platform = AOS")
    extra: dict[str, Any] = {
        "users_matched": found.users,
        "load_s": loaded["load_s"],
        "loaded_now": loaded["loaded"],
    }
    for name, (filter_, matches) in SIDE.items():
        extra[name], side = _timed(runtime, service, filter_, repeats)
        _check(side, users, matches, name)
    return figure(
        "estimate_s",
        Measure("filter estimate (plan = pro AND platform = AOS), median", seconds, "s"),
        Measure("users of the service (one device each)", users, "users"),
        {"users": users, "repeats": repeats, "tags_per_user": 3},
        value=seconds,
        extra=extra,
    )
