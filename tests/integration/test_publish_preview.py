"""The publish preview (dry run): ``POST /v1/publish/{type}/preview`` through the real API. What it
shows is what a publish of the same body sends (the emulator's record of the publish after it, byte
for byte); it writes no job; a body the publish refuses gets the same status and error; another
tenant's templates, segments and topics are unknown to it; `notee publish --dry-run` as a subprocess."""

from __future__ import annotations

import json
import os

import pytest
from notee_sdk import Client, ValidationFailed
from sqlalchemy import text

from notee.core import notification_id
from notee.providers import fcm
from tests.support.cli import notee
from tests.support.fanout import run_worker_until_idle
from tests.support.registry import admin_headers, apns_credentials, random_token

pytestmark = pytest.mark.tenant(credentials=True)

VARIANTS = {"ko": {"title": "안녕 {{name}}", "body": "새 소식", "data": {"lang": "ko"}}}
RICH = {
    "image": "https://cdn.example.com/{{sku}}.jpg",
    "sound": "chime.caf",
    "link": "shop://items/{{sku}}",
    "collapse_key": "news",
    "ios": {"subtitle": "Item {{sku}}"},
    "android": {"channel_id": "news"},
}
PRO = [[{"tag": "plan", "op": "=", "value": "pro"}]]


def _compact(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _with_apns(client, settings, service) -> None:
    r = client.put(
        f"/v1/admin/services/{service}/credentials/apns", json=apns_credentials(), headers=admin_headers(settings)
    )
    assert r.status_code == 200, r.text


def _member(tenant, os_, *, locale=None, topic=None, tags=None, service_user_id=None):
    token = random_token(os_.lower())
    user_id = service_user_id or "p-" + token[-12:]
    body = {"name": "Member"} | ({"locale": locale} if locale else {}) | ({"tags": tags} if tags else {})
    r = tenant.client.put(f"/v1/users/{user_id}", json=body, headers=tenant.headers)
    assert r.status_code in (200, 201), r.text
    user = r.json()["user_id"]
    d = tenant.client.post(f"/v1/users/{user}/devices", json={"token": token, "os": os_}, headers=tenant.headers)
    assert d.status_code in (200, 201), d.text
    if topic:
        s = tenant.client.put(f"/v1/users/{user}/subscriptions/topic/news/{topic}", headers=tenant.headers)
        assert s.status_code in (200, 201), s.text
    return token


def _jobs(runtime, service) -> int:
    with runtime.sessions.begin() as s:
        return int(s.execute(text("SELECT COUNT(*) FROM fanout_job WHERE service = :s"), {"s": service}).scalar_one())


def _news(tenant, method="TOPIC") -> None:
    tenant.template(
        method, "news", title="Hello {{name}}", body="Body", defaults={"name": "you"}, variants=VARIANTS, payload=RICH
    )


def _sampled(body: dict, where: str | None = None) -> dict:
    """A sent body with its notification id (as long as the sample, checked) replaced by the sample."""
    copy = json.loads(json.dumps(body))
    holder = copy[where] if where else copy
    assert len(holder[notification_id.KEY]) == len(notification_id.SAMPLE)
    holder[notification_id.KEY] = notification_id.SAMPLE
    return copy


def test_a_topic_preview_shows_what_the_publish_then_sends_byte_for_byte(
    client, settings, runtime, tenant, emulator, emu_runtime
):
    service, headers = tenant
    _with_apns(client, settings, service)
    _news(tenant)
    android = _member(tenant, "AOS", topic="sports")
    iphone = _member(tenant, "IOS", locale="ko-KR", topic="sports")
    body = {"topic": "sports", "variables": {"name": "Kim", "sku": "p7"}, "payload": {"badge": 3}}
    r = client.post("/v1/publish/news/preview", json=body, headers=headers)
    assert r.status_code == 200, r.text
    shown = r.json()
    assert shown["dry_run"] is True and _jobs(runtime, service) == 0
    assert [v["locale"] for v in shown["variants"]] == [None, "ko"]
    default, ko = shown["variants"]
    assert (default["title"], ko["title"], ko["data"]) == ("Hello Kim", "안녕 Kim", {"lang": "ko"})
    assert default["payload"]["image"] == "https://cdn.example.com/p7.jpg" and default["payload"]["badge"] == 3
    assert {os: p["provider"] for os, p in default["platforms"].items()} == {"AOS": "fcm", "IOS": "apns"}
    assert shown["reach"]["method"] == "topic_counter" and not any("0 " in w for w in shown["warnings"])

    published = client.post("/v1/publish/news", json=body, headers=headers)
    assert published.status_code == 202, published.text
    run_worker_until_idle(emu_runtime, [service])
    fcm_seen, apns_seen = emulator.last_request(android), emulator.last_request(iphone)
    assert fcm_seen is not None and apns_seen is not None and apns_seen["api"] == "apns"
    previewed = default["platforms"]["AOS"]
    message = {k: v for k, v in previewed["body"]["message"].items() if k != "token"}
    # The notification id is per device: the preview shows a sample of its length in its place.
    fcm_body, apns_body = _sampled(fcm_seen["body"], "data"), _sampled(apns_seen["body"])
    assert {k: v for k, v in fcm_body.items() if k != "token"} == message
    assert previewed["bytes"] == _compact(fcm.counted_content(fcm_seen["body"])) and previewed["limit"] == 4096
    ios = ko["platforms"]["IOS"]  # the ko-KR device got the ko variant
    assert apns_body == ios["body"] and ios["bytes"] == _compact(apns_seen["body"])
    for name in ("apns-push-type", "apns-priority", "apns-collapse-id"):
        assert apns_seen["headers"][name] == ios["headers"][name], name
    assert "authorization" not in ios["headers"] and ios["headers"]["apns-topic"] == "<bundle id>"


def test_a_filter_preview_counts_its_devices_and_warns_on_none_and_on_a_sample_recipient(
    client, runtime, tenant, emulator
):
    service, headers = tenant
    _news(tenant, "SINGLE")
    _member(tenant, "AOS", tags={"plan": "pro"})
    _member(tenant, "IOS", tags={"plan": "pro"})
    _member(tenant, "AOS", tags={"plan": "free"})
    body = {"filter": PRO, "method": "SINGLE", "platforms": ["AOS"], "variables": {"sku": "s1"}}
    r = client.post("/v1/publish/news/preview", json=body, headers=headers)
    assert r.status_code == 200, r.text
    shown = r.json()
    assert (shown["reach"]["devices"], shown["reach"]["exact"]) == (1, True), shown["reach"]
    assert set(shown["variants"][0]["platforms"]) == {"AOS"}  # narrowed to the platforms asked
    assert shown["warnings"] == [] and shown["sample_recipient"] is None
    nobody = client.post(
        "/v1/publish/news/preview",
        json=body | {"filter": [[{"tag": "plan", "op": "=", "value": "gold"}]]},
        headers=headers,
    )
    assert nobody.status_code == 200 and nobody.json()["reach"]["devices"] == 0
    assert nobody.json()["warnings"][0].startswith("the target reaches 0 devices"), nobody.json()["warnings"]
    tenant.template("SINGLE", "hi", title="Hi {{ recipient.name }}", body="b")
    personal = client.post("/v1/publish/hi/preview", json={"filter": PRO, "method": "SINGLE"}, headers=headers)
    assert personal.status_code == 200, personal.text
    answer = personal.json()
    assert answer["variants"][0]["title"] == "Hi Sample Recipient"
    assert answer["sample_recipient"]["name"] == "Sample Recipient"
    assert any("recipient.name" in w and "sample recipient" in w for w in answer["warnings"]), answer["warnings"]
    assert _jobs(runtime, service) == 0


@pytest.mark.parametrize(
    "body",
    [
        {"topic": "a", "users": ["u1"]},  # two targets
        {},  # no target
        {"topic": "sports", "method": "SINGLE"},  # a topic takes TOPIC templates
        {"filter": [[{"tag": "plan", "op": "elapsed_gt", "value": "x"}]]},
        {"segments": {"include": ["nope"]}},
        {"topic": "bad topic!"},
        {"topic": "sports", "send_at": "2001-01-01T00:00:00Z"},
        {"topic": "sports", "payload": {"badge": -1}},
        {"topic": "sports", "local_time": "25:00"},
        {"topic": "sports", "extra": 1},
    ],
)
def test_a_bad_request_is_refused_as_the_publish_refuses_it_and_nothing_is_written(client, runtime, tenant, body):
    service, headers = tenant
    tenant.template("TOPIC", "news", title="Hello {{name}}", body="Body")  # no default: {{name}} must be given
    body = body if body.get("topic") != "sports" else body | {"variables": {"name": "x"}}
    shown = client.post("/v1/publish/news/preview", json=body, headers=headers)
    sent = client.post("/v1/publish/news", json=body, headers=headers)
    assert shown.status_code == sent.status_code == 422, (shown.text, sent.text)
    assert _details(shown) == _details(sent)
    assert _jobs(runtime, service) == 0


def _details(response) -> list[dict]:
    """An error's details, but the server clock a send_at error reports (read a moment apart)."""
    return [{k: v for k, v in d.items() if k != "ctx" or "now" not in v} for d in response.json()["error"]["details"]]


def test_missing_variables_and_an_unknown_type_are_the_publishs_errors(client, tenant):
    _, headers = tenant
    tenant.template("TOPIC", "news", title="Hello {{name}}", body="Body")
    for type_, body, status in (("news", {"topic": "sports"}, 422), ("nothere", {"topic": "sports"}, 404)):
        shown = client.post(f"/v1/publish/{type_}/preview", json=body, headers=headers)
        sent = client.post(f"/v1/publish/{type_}", json=body, headers=headers)
        assert shown.status_code == sent.status_code == status, (shown.text, sent.text)
        assert shown.json()["error"] == sent.json()["error"]


def test_another_tenants_template_segment_and_topic_are_unknown(client, runtime, tenant, make_tenant):
    service, headers = tenant
    other = make_tenant()
    other.template("TOPIC", "theirs", title="t", body="b")
    other.template("TOPIC", "news", title="Secret {{x}}", body="b", defaults={"x": "1"})
    assert client.post("/v1/segments", json={"name": "vip", "filter": PRO}, headers=other.headers).status_code == 201
    _member(other, "AOS", topic="private")
    tenant.template("TOPIC", "news", title="Mine", body="b")
    theirs = client.post("/v1/publish/theirs/preview", json={"topic": "x"}, headers=headers)
    assert theirs.status_code == 404
    segment = client.post("/v1/publish/news/preview", json={"segments": {"include": ["vip"]}}, headers=headers)
    assert segment.status_code == 422 and "vip" in segment.text
    topic = client.post("/v1/publish/news/preview", json={"topic": "private"}, headers=headers)
    assert topic.status_code == 200, topic.text
    assert topic.json()["reach"]["users"] == 0 and topic.json()["variants"][0]["title"] == "Mine"
    assert "Secret" not in topic.text
    assert _jobs(runtime, service) == 0 and _jobs(runtime, other.service) == 0


@pytest.fixture()
def env(api_process, tenant) -> dict[str, str]:
    _news(tenant)
    base = {k: v for k, v in os.environ.items() if k not in ("NOTEE_API_KEY", "NOTEE_ADMIN_TOKEN")}
    return base | {"NOTEE_URL": api_process.url, "NOTEE_API_KEY": tenant.api_key}


def test_the_cli_dry_run_prints_the_preview_and_creates_no_job(env, runtime, tenant):
    _member(tenant, "AOS", topic="sports")
    prose = notee("publish", "news", "sports", "--var", "sku=z9", "--dry-run", env=env)
    assert prose.returncode == 0, prose.stderr
    assert "dry run: nothing sent" in prose.stdout and "[ko] '안녕 you'" in prose.stdout, prose.stdout
    assert "AOS via fcm:" in prose.stdout and "/4,096 bytes" in prose.stdout
    as_json = notee("publish", "news", "--topic", "sports", "--var", "sku=z9", "--dry-run", "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert answer["dry_run"] is True and answer["variants"][0]["payload"]["image"] == "https://cdn.example.com/z9.jpg"
    nobody = notee("publish", "news", "--topic", "empty", "--var", "sku=z9", "--dry-run", env=env)
    assert nobody.returncode == 0 and "reaches 0" in nobody.stderr, nobody.stderr
    refused = notee("publish", "news", "sports", "--condition", "'a' in topics", "--dry-run", env=env)
    assert refused.returncode == 2, (refused.returncode, refused.stderr)
    assert _jobs(runtime, tenant.service) == 0


def test_the_sdks_preview_takes_publishs_arguments_and_raises_its_errors(api_process, runtime, tenant):
    _news(tenant)
    _member(tenant, "IOS", topic="sports")
    with Client(api_process.url, api_key=tenant.api_key) as sdk:
        shown = sdk.preview("news", topic="sports", platforms=["IOS"], variables={"sku": "k1"}, payload={"badge": 1})
        assert shown.dry_run is True and set(shown.variants[0].platforms) == {"IOS"}
        assert shown.variants[1].locale == "ko" and shown.variants[0].payload["badge"] == 1
        with pytest.raises(ValidationFailed) as refused:
            sdk.preview("news", topic="sports", users=["u1"])
        assert refused.value.status == 422
    assert _jobs(runtime, tenant.service) == 0


def test_the_topic_routes_preview_answers_as_the_general_one_with_the_topic_publishs_errors(
    client, runtime, tenant, make_tenant
):
    service, headers = tenant
    _news(tenant)
    body = {"variables": {"sku": "t1"}, "platforms": ["AOS"]}
    shown = client.post("/v1/topics/news/sports/publish/preview", json=body, headers=headers)
    general = client.post("/v1/publish/news/preview", json=body | {"topic": "sports"}, headers=headers)
    assert shown.status_code == general.status_code == 200, shown.text
    assert shown.json() == general.json()
    for path, status in (("/v1/topics/news/sports/publish", 422), ("/v1/topics/nope/sports/publish", 404)):
        refused = client.post(path + "/preview", json={"payload": {"badge": -1}}, headers=headers)
        sent = client.post(path, json={"payload": {"badge": -1}}, headers=headers)
        assert refused.status_code == sent.status_code == status, (refused.text, sent.text)
        assert refused.json()["error"] == sent.json()["error"]
    other = make_tenant()
    other.template("TOPIC", "theirs", title="t", body="b")
    assert client.post("/v1/topics/theirs/sports/publish/preview", headers=headers).status_code == 404
    assert _jobs(runtime, service) == 0
