"""Naming a user by your own id: every method taking a ``user_id`` also takes
``by_service_id("alice")`` (the API's ``ext:alice``), so a backend need not keep Notee's ids."""

from __future__ import annotations


def by_service_id(service_user_id: str) -> str:
    """The user your service calls ``service_user_id``, where a method asks for a ``user_id``.
    An id containing ``/`` cannot travel in a path segment: use the ``user_id`` put_user answered."""
    if "/" in service_user_id:
        raise ValueError("a service user id with '/' cannot name a user in a path: use its user_id")
    return "ext:" + service_user_id
