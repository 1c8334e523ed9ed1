"""WEB devices (docs/WEB-PUSH.md): a browser's push subscription becomes the device's token
(``notee.core.webpush_token``), checked on registration, import and rotation like a provider token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from notee.core import webpush_token
from notee.domain.rules import bad, check_token


def check_device_token(os: str, token: Any, field_: str = "token") -> str:
    """A device token valid for its platform: a WEB one must hold a valid subscription."""
    checked = check_token(token, field_)
    if os == "WEB":
        webpush_token.check_token(checked, field_)
    return checked


def resolve_token(os: str, token: str | None, subscription: Mapping[str, Any] | None) -> str:
    """The token a registration names: ``token``, or for a WEB device the browser's
    ``PushSubscription.toJSON()`` (``endpoint``, ``keys.p256dh``, ``keys.auth``) as its token."""
    if subscription is not None:
        if os != "WEB":
            raise bad("subscription", "only a device of os WEB registers a push subscription", "web_push_subscription")
        if token is not None:
            raise bad("token", "give either token or subscription, not both", "web_push_subscription")
        keys = subscription.get("keys") or {}
        sub = webpush_token.check_subscription(subscription.get("endpoint"), keys.get("p256dh"), keys.get("auth"))
        return webpush_token.encode(sub)
    if token is None:
        what = "subscription (the browser's PushSubscription)" if os == "WEB" else "token"
        raise bad("subscription" if os == "WEB" else "token", f"{what} is required", "missing")
    return check_device_token(os, token)
