"""The chaos run's hostile probes (chaos/hostile.py) against a real `notee api`: each body probe gets
the answer the chaos ledger holds it to (docs/API.md "Limits at the edge"), and the connection flood
is capped on its own loopback address while a client on 127.0.0.1 is served. Without this the
chaos run could expect answers the API never gives (in CI every probe once met the cap: 429)."""

from __future__ import annotations

from collections import Counter

import httpx

from chaos import hostile


def test_each_body_probe_gets_its_documented_answer(processes, tenant):
    api = processes.api()
    for name, raw, expect in hostile.probes(tenant.api_key):
        got = hostile.burst("127.0.0.1", api.port, [raw] * 3)
        assert got == Counter({expect: 3}), (name, got)


def test_the_flood_is_capped_on_its_own_address_while_127_0_0_1_is_served(processes):
    cap = 20
    api = processes.api(NOTEE_API_MAX_CONNECTIONS_PER_ADDRESS=str(cap))
    got = hostile.flood("127.0.0.1", api.port, 60)
    assert set(got) <= {200, 429}, got
    assert got[429] >= 60 - cap and got[200] >= 1, got
    assert httpx.get(f"{api.url}/healthz", timeout=10).status_code == 200


def test_slow_headers_are_answered_408_at_the_deadline_or_429_over_the_cap(processes):
    cap = 10
    api = processes.api(NOTEE_API_MAX_CONNECTIONS_PER_ADDRESS=str(cap), NOTEE_API_HEAD_TIMEOUT_S="1.5")
    got: Counter[int] = Counter()
    hostile.slow_headers("127.0.0.1", api.port, 25, 6.0, got)
    assert got == Counter({429: 25 - cap, 408: cap}), got  # none held open past the deadline, none unanswered
