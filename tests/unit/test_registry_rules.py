"""Pure rules of the registry (validation, API keys, the secrets box): table-driven, no stores."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet, InvalidToken

from notee.core import crypto
from notee.core.errors import InvalidInput
from notee.domain import rules as reg


@pytest.mark.parametrize(
    "value, ok",
    [
        ("SMEEM", True),
        ("AB", True),
        ("A_1", True),
        ("A" + "B" * 31, True),
        ("A", False),
        ("smeem", False),
        ("1ABC", False),
        ("_AB", False),
        ("A" + "B" * 32, False),
        ("AB-C", False),
        ("AB C", False),
        ("", False),
        (5, False),
        (None, False),
    ],
)
def test_service_id(value, ok):
    if ok:
        assert reg.check_service_id(value) == value
    else:
        with pytest.raises(InvalidInput):
            reg.check_service_id(value)


@pytest.mark.parametrize(
    "value, ok",
    [
        ("Asia/Seoul", True),
        ("UTC", True),
        ("America/New_York", True),
        ("Europe/London", True),
        ("Mars/Olympus", False),
        ("", False),
        ("../../etc/passwd", False),
        ("Asia/Seoul\n", False),
        ("/etc/localtime", False),
        ("x" * 65, False),
        (9, False),
    ],
)
def test_timezone(value, ok):
    if ok:
        assert reg.check_timezone(value) == value
    else:
        with pytest.raises(InvalidInput):
            reg.check_timezone(value)


@pytest.mark.parametrize(
    "value, ok",
    [
        ("abcdefgh", True),
        ("fcm:APA91b-_x/y+z=", True),
        ("a" * 512, True),
        ("0123456789abcdef" * 4, True),
        ("abcdefg", False),
        ("a" * 513, False),
        ("abc defgh", False),
        ("abcdefgh\x00", False),
        ("토큰토큰토큰토큰토큰", False),
        ("abcdefgh\t", False),
        (12345678, False),
        ("", False),
    ],
)
def test_token(value, ok):
    if ok:
        assert reg.check_token(value) == value
    else:
        with pytest.raises(InvalidInput):
            reg.check_token(value)


@pytest.mark.parametrize(
    "value, kw, ok",
    [
        ("daehwan", {}, True),
        ("대환", {}, True),
        ("", {}, True),
        ("a" * 191, {}, True),
        ("a" * 192, {}, False),
        ("a\x00b", {}, False),
        ("a\x1bb", {}, False),
        ("a\x7fb", {}, False),
        ("a\x85b", {}, False),
        ("a\nb", {}, False),
        ("a\nb", {"newlines": True}, True),
        ("a\rb", {"newlines": True}, False),
        ("\ud800", {}, False),
        (1, {}, False),
        (None, {}, False),
        ("", {"min_len": 1}, False),
    ],
)
def test_text(value, kw, ok):
    if ok:
        assert reg.check_text("f", value, max_len=191, **kw) == value
    else:
        with pytest.raises(InvalidInput) as e:
            reg.check_text("f", value, max_len=191, **kw)
        assert e.value.details[0]["loc"] == ["f"]


@pytest.mark.parametrize(
    "value, ok",
    [
        (None, True),
        ({}, True),
        ({"a": "b", "deep_link": "app://x"}, True),
        ({"a": {"b": "c"}}, False),
        ({"a": 1}, False),
        ({"a": None}, False),
        ({"": "x"}, False),
        ({"k" * 65: "v"}, False),
        ({"a": "v" * 1025}, False),
        ({f"k{i}": "v" for i in range(33)}, False),
        (["a"], False),
        ("a=b", False),
    ],
)
def test_data(value, ok):
    if ok:
        assert reg.check_data(value) == value
    else:
        with pytest.raises(InvalidInput):
            reg.check_data(value)


@pytest.mark.parametrize(
    "value, ok",
    [
        (None, True),
        (0, True),
        (3600, True),
        (2_419_200, True),
        (-1, False),
        (2_419_201, False),
        ("60", False),
        (True, False),
        (1.5, False),
    ],
)
def test_ttl(value, ok):
    if ok:
        assert reg.check_ttl(value) == value
    else:
        with pytest.raises(InvalidInput):
            reg.check_ttl(value)


@pytest.mark.parametrize(
    "value, ok",
    [
        ("3f2504e0-4f89-11d3-9a0c-0305e82c3301", True),
        ("3F2504E0-4F89-11D3-9A0C-0305E82C3301", True),
        ("nope", False),
        ("", False),
        ("3f2504e0-4f89-11d3-9a0c", False),
    ],
)
def test_user_id(value, ok):
    if ok:
        assert reg.check_user_id(value) == value.lower()
    else:
        with pytest.raises(InvalidInput):
            reg.check_user_id(value)


@pytest.mark.parametrize(
    "title, body, data, size",
    [
        ("a", "b", None, 2),
        ("가", "", None, 3),
        ("t", "b", {"k": "v"}, 2 + len('{"k": "v"}')),
    ],
)
def test_template_size(title, body, data, size):
    assert reg.template_size(title, body, data) == size


def test_api_key_round_trip():
    new = crypto.generate_api_key()
    assert new.api_key.startswith("nk_") and len(new.key_id) == 16
    assert new.secret not in repr(new)
    assert crypto.parse_api_key(new.api_key) == (new.key_id, new.secret)
    assert crypto.secret_matches(new.secret, new.key_hash)
    assert not crypto.secret_matches(new.secret + "x", new.key_hash)
    assert not crypto.secret_matches(new.secret, None)
    assert new.key_hash == crypto.hash_secret(new.secret) and len(new.key_hash) == 32


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "nk_",
        "nk_0123456789abcdef",
        "nk_0123456789abcdef_",
        "nk_0123456789ABCDEF_" + "a" * 43,
        "xx_0123456789abcdef_" + "a" * 43,
        "nk_0123456789abcde_" + "a" * 43,
        "nk_0123456789abcdef_a b" + "a" * 40,
    ],
)
def test_malformed_api_keys(raw):
    assert crypto.parse_api_key(raw) is None


def test_tokens_equal():
    assert crypto.tokens_equal("abc", "abc")
    assert not crypto.tokens_equal("abc", "abd")
    assert not crypto.tokens_equal("", "abc")


def test_secrets_box():
    key = Fernet.generate_key().decode()
    box = crypto.SecretsBox(key)
    blob = box.encrypt(b"private")
    assert b"private" not in blob
    assert box.decrypt(blob) == b"private"
    assert key not in repr(box)
    with pytest.raises(InvalidToken):
        crypto.SecretsBox(Fernet.generate_key().decode()).decrypt(blob)


@pytest.mark.parametrize(
    "path, shown",
    [
        ("/v1/users/u/devices/fcm:APA91bsecrettoken1234", "/v1/users/u/devices/fcm:AP…(25)"),
        ("/v1/users/u/devices/a%2Fb-secret-token-000", "/v1/users/u/devices/a%2Fb-…(22)"),
        ("/v1/users/u/devices/tok/with/slash", "/v1/users/u/devices/tok/wi…(14)"),
        ("/v1/users/u/devices", "/v1/users/u/devices"),
        ("/v1/devices/rotate", "/v1/devices/rotate"),
        ("/v1/templates", "/v1/templates"),
    ],
)
def test_access_log_never_shows_a_full_token(path, shown):
    import logging

    from notee.api.routes.devices import TokenPathFilter

    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "DELETE", path, "1.1", 204),
        None,
    )
    assert TokenPathFilter().filter(record)
    assert record.getMessage() == f'127.0.0.1:5 - "DELETE {shown} HTTP/1.1" 204'
