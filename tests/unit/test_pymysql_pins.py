"""PyMySQL is pinned exactly because of a performance detour: ``SharedTlsContextConnection``
(notee/store/mysql.py) overrides PyMySQL's private ``Connection._create_ssl_ctx`` so that the
"preferred" TLS context (no TLS option given: TLS if the server offers it, unverified) is built once
per process, not in every new connection (~20 ms of CPU each; docs/BENCHMARKS.md, "Performance
detours"). Each test fails naming the detour, the pinned and installed versions, and what to re-check.
No server is needed: ``defer_connect`` builds a connection's TLS context without connecting."""

from __future__ import annotations

import inspect
import ssl

import pymysql.connections

from notee.store.mysql import SharedTlsContextConnection
from tests.support.pins import PYMYSQL_TLS


def _unconnected(**options: object) -> SharedTlsContextConnection:
    return SharedTlsContextConnection(host="127.0.0.1", user="nobody", defer_connect=True, **options)  # type: ignore[arg-type]


def test_pymysql_is_pinned_exactly_to_the_installed_version() -> None:
    PYMYSQL_TLS.assert_pinned_to_installed()


def test_pymysql_builds_the_preferred_context_through_the_overridden_method() -> None:
    method = getattr(pymysql.connections.Connection, "_create_ssl_ctx", None)
    assert method is not None, PYMYSQL_TLS.loud("Connection._create_ssl_ctx is gone")
    params = list(inspect.signature(method).parameters)
    assert params == ["self", "sslp"], PYMYSQL_TLS.loud(f"Connection._create_ssl_ctx now takes {params}")
    source = inspect.getsource(pymysql.connections.Connection.__init__)
    assert "self.ctx = self._create_ssl_ctx({})" in source, PYMYSQL_TLS.loud(
        "Connection.__init__ no longer builds the preferred context with _create_ssl_ctx({})"
    )


def test_connections_without_tls_options_share_one_context_as_pymysql_builds_it() -> None:
    first, second = _unconnected(), _unconnected()
    assert first.ssl and second.ssl, PYMYSQL_TLS.loud("a connection without TLS options no longer prefers TLS")
    assert first.ctx is second.ctx, PYMYSQL_TLS.loud("the preferred context is built per connection again")
    assert not first._ssl_required  # type: ignore[attr-defined]  # preferred, not required: a server without TLS is fine
    plain = pymysql.connections.Connection(host="127.0.0.1", user="nobody", defer_connect=True)
    mine = first.ctx
    assert (mine.verify_mode, mine.check_hostname, mine.verify_flags, mine.options, mine.minimum_version) == (
        plain.ctx.verify_mode,
        plain.ctx.check_hostname,
        plain.ctx.verify_flags,
        plain.ctx.options,
        plain.ctx.minimum_version,
    ), PYMYSQL_TLS.loud("the shared context differs from the one PyMySQL builds per connection")
    assert mine.verify_mode == ssl.CERT_NONE


def test_a_connection_with_tls_options_gets_its_own_context() -> None:
    shared = _unconnected().ctx
    own = _unconnected(ssl_verify_cert=True).ctx
    other = _unconnected(ssl_verify_cert=True).ctx
    assert own is not shared and own is not other
    assert own.verify_mode == ssl.CERT_REQUIRED  # the options still apply
