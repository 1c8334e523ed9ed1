"""FCM's reserved data keys (Message.data in the FCM v1 reference: "from", "message_type", and keys
starting with "google." or "gcm.notification."): Notee refuses them with a 422 naming ``data`` when a
template, publish or send is made, and the emulator refuses them as FCM does, so such a push can
never be discovered failing per Android device."""

from __future__ import annotations

import pytest

from notee.core.errors import InvalidInput
from notee.domain.rules import check_data
from notee.emulator.rules import FcmProblem, check_fcm
from notee.providers.base import Message
from notee.providers.fcm import fcm_message

RESERVED = ["from", "message_type", "google.c.a.e", "gcm.notification.title"]
ALLOWED = ["fromage", "google", "googled", "gcm.data", "message_types", "notee_tag"]


def _fcm(data: dict[str, str]) -> None:
    check_fcm(fcm_message(Message("tok", "AOS", "Hi", "Shipped", data, 60, "high", None, None)))


@pytest.mark.parametrize("key", RESERVED)
def test_a_reserved_key_is_a_422_naming_data_and_the_emulator_refuses_it_too(key: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_data({"ok": "1", key: "x"})
    assert caught.value.details is not None and caught.value.details[0]["loc"] == ["data"]
    assert repr(key) in caught.value.details[0]["msg"]
    with pytest.raises(FcmProblem) as refused:
        _fcm({key: "x"})
    assert refused.value.field.startswith("message.data[") and key in refused.value.text


@pytest.mark.parametrize("key", ALLOWED)
def test_keys_that_only_resemble_a_reserved_one_pass_both(key: str) -> None:
    assert check_data({key: "x"}) == {key: "x"}
    _fcm({key: "x"})
