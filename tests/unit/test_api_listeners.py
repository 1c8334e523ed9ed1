"""TLS and the admin listener (issue 15, item 3): `notee api` serves HTTPS with a certificate and key,
and with NOTEE_API_ADMIN_PORT / --admin-port the admin API is served on its own listener only.

Here, the rules that need no server; tests/integration/test_api_listeners.py has the rest."""

from __future__ import annotations

import pytest

from notee.api.server import listeners
from notee.core.settings import Settings


def test_certificate_and_key_come_together():
    with pytest.raises(ValueError, match="set together"):
        Settings(api_tls_cert_file="/x.pem")


def test_admin_listener_needs_its_own_port():
    split = Settings(api_admin_port=9001)
    assert [(lst.port, lst.part) for lst in listeners(split, "127.0.0.1", 9000)] == [(9000, "tenant"), (9001, "admin")]
    assert [lst.part for lst in listeners(Settings(), "127.0.0.1", 9000)] == ["all"]
    with pytest.raises(ValueError):
        listeners(split, "127.0.0.1", 9001)
