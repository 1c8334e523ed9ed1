"""The tenant fixtures: one family, so that every test owns its service (a random identifier) and
everything it writes hangs off it. Tests share no rows and can run in parallel.

- ``service_id``: a fresh identifier; nothing is written.
- ``tenant``: a service made through the admin API, with an API key: a ``Tenant`` (``.service``,
  ``.headers``, ``.template(...)``, ``.user(...)``; unpacks as ``service, headers = tenant``).
- ``store_tenant``: a service written straight to the store with its row writers (no API, no key),
  for store, domain and scheduler tests: its identifier.
- ``make_tenant``: a factory, for a test that needs more than one (``make_tenant()`` takes the same
  options as the marker).
- ``module_tenant`` / ``make_module_tenant``: the same, made once for the tests of a module that
  share a data set built once (their own tenants all the same: no other module writes to them).

Both kinds read ``@pytest.mark.tenant(credentials=True, timezone="Asia/Seoul")`` on the test or its
module: FCM credentials (any test that sends needs them), the service's time zone. A module that
needs more of its tenant (templates, users) overrides ``tenant`` with a fixture that asks for the
family's one and adds them. Registered as a plugin by tests/conftest.py: request, do not import.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from notee.core.settings import Settings
from notee.store.runtime import Runtime
from tests.support import registry

__all__ = ["Tenant", "make_module_tenant", "make_tenant", "module_tenant", "service_id", "store_tenant", "tenant"]


@dataclass
class Tenant:
    """A service made through the admin API and the auth headers of one of its API keys."""

    service: str
    headers: dict[str, str]
    client: TestClient

    def __iter__(self) -> Iterator[Any]:  # service, headers = tenant
        return iter((self.service, self.headers))

    @property
    def api_key(self) -> str:
        return self.headers["Authorization"].removeprefix("Bearer ")

    def template(self, method: str = "TOPIC", type_: str | None = None, **fields: Any) -> dict[str, Any]:
        """PUT a template (``registry.new_template``): the TemplateOut JSON."""
        return registry.new_template(self.client, self.headers, method, type_, **fields)

    def user(
        self, service_user_id: str | None = None, *, name: str = "daehwan", devices: Sequence[tuple[str, str]] = ()
    ) -> str:
        """PUT a user and POST its (token, os) devices (``registry.new_user``): its user_id."""
        return registry.new_user(self.client, self.headers, service_user_id, name=name, devices=devices)


def _options(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker("tenant")
    options = dict(marker.kwargs) if marker else {}
    unknown = set(options) - {"credentials", "timezone"}
    assert not unknown, f"@pytest.mark.tenant takes credentials= and timezone=, not {unknown}"
    return options


def new_service_id() -> str:
    return "T" + secrets.token_hex(6).upper()


@pytest.fixture()
def service_id() -> str:
    """A fresh tenant identifier (the row is made by ``tenant``, ``store_tenant`` or the test)."""
    return new_service_id()


def _maker(client: TestClient, settings: Settings, defaults: dict[str, Any]) -> Callable[..., Tenant]:
    def make(service: str | None = None, **options: Any) -> Tenant:
        chosen = defaults | options
        service = service or new_service_id()
        headers = registry.new_service(
            client, settings, service, timezone=chosen.get("timezone"), credentials=chosen.get("credentials", False)
        )
        return Tenant(service, headers, client)

    return make


@pytest.fixture()
def make_tenant(client: TestClient, settings: Settings, request: pytest.FixtureRequest) -> Callable[..., Tenant]:
    return _maker(client, settings, _options(request))


@pytest.fixture(scope="module")
def make_module_tenant(client: TestClient, settings: Settings, request: pytest.FixtureRequest) -> Callable[..., Tenant]:
    return _maker(client, settings, _options(request))


@pytest.fixture(scope="module")
def module_tenant(make_module_tenant: Callable[..., Tenant]) -> Tenant:
    return make_module_tenant()


@pytest.fixture()
def tenant(make_tenant: Callable[..., Tenant], service_id: str) -> Tenant:
    return make_tenant(service_id)


@pytest.fixture()
def store_tenant(runtime: Runtime, service_id: str, request: pytest.FixtureRequest) -> str:
    options = _options(request)
    return registry.make_service(
        runtime, service_id, options.get("timezone") or "Asia/Seoul", fcm=options.get("credentials", False)
    )
