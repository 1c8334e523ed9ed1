"""Localized templates (issue 18 item 5): a template holds variants per locale (BCP 47), users and
devices carry a locale (a device's wins), each recipient gets the best match (language-Script-REGION,
then shorter, then the template's own text), and rendering happens once per job and variant (topic,
cycle) or once per variant used (single send), never per device -- counted, and checked as the
emulator received each push.

Here, the rules that need no server; tests/integration/test_localized_templates.py has the rest."""

from __future__ import annotations

import pytest

from notee.core.errors import InvalidInput
from notee.core.vocabulary import Recipient
from notee.domain import render
from notee.domain.rules import canonical_locale, check_locale
from notee.worker.messages import messages_for

VARIANTS = {
    "de": {"title": "Hallo {{name}}", "body": "Neu"},
    "pt-BR": {"title": "Olá {{name}}", "body": "Novo", "data": {"lang": "pt-BR"}},
    "zh-Hant": {"title": "你好 {{name}}", "body": "新"},
}

TEMPLATE = {"title": "Hello {{name}}", "body": "New", "data": {"lang": "en", "k": "v"}, "variants": VARIANTS}


@pytest.mark.parametrize(
    "tag, canonical",
    [("de", "de"), ("pt-br", "pt-BR"), ("ZH-hant-tw", "zh-Hant-TW"), ("es-419", "es-419"), ("haw", "haw")],
)
def test_locale_tags_are_canonicalised(tag, canonical):
    assert check_locale(tag) == canonical == canonical_locale(tag)


@pytest.mark.parametrize("tag", ["", "d", "de_DE", "deutsch", "de-", "de-DEU1", "en-US-x-private", "de DE", 7, None])
def test_other_tags_are_refused(tag):
    with pytest.raises(InvalidInput):
        check_locale(tag)


@pytest.mark.parametrize(
    "locale, chosen",
    [
        ("de", "de"),
        ("de-AT", "de"),  # language-region -> language
        ("pt-BR", "pt-BR"),
        ("pt-PT", None),  # no "pt" variant: the template's own text
        ("zh-Hant-TW", "zh-Hant"),
        ("zh-Hans-CN", None),
        ("fr", None),
        (None, None),
    ],
)
def test_best_match(locale, chosen):
    assert render.choose_variant(locale, list(VARIANTS)) == chosen


def _content() -> render.TemplateContent:
    return render.TemplateContent(
        TEMPLATE["title"],
        TEMPLATE["body"],
        TEMPLATE["data"],
        {"name": "there"},
        None,
        "high",
        render.variants_from_json(VARIANTS),
    )


def test_render_all_renders_each_variant_once_and_merges_data(monkeypatch):
    calls = []
    real = render.render
    monkeypatch.setattr(render, "render", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = render.render_all(_content(), {"name": "Kim"})
    assert len(calls) == 1 + len(VARIANTS)
    assert (got.default.title, got.default.data) == ("Hello Kim", {"lang": "en", "k": "v"})
    assert (got.variants["pt-BR"].title, got.variants["pt-BR"].data) == ("Olá Kim", {"lang": "pt-BR", "k": "v"})
    assert got.variants["de"].data == {"lang": "en", "k": "v"}
    payload = got.as_job_payload()
    assert set(payload["variants"]) == set(VARIANTS)


def test_every_missing_variable_of_every_variant_is_one_error():
    content = render.TemplateContent(
        "{{a}}", "b", None, None, None, "high", render.variants_from_json({"de": {"title": "{{a}} {{b}}", "body": "x"}})
    )
    with pytest.raises(InvalidInput) as err:
        render.render_all(content, {})
    assert sorted(d["loc"][-1] for d in err.value.details) == ["a", "b"]


def test_a_page_gets_each_recipients_variant_without_rendering():
    payload = render.render_all(_content(), {"name": "Kim"}).as_job_payload()
    page = [Recipient("t1", "AOS", "u1"), Recipient("t2", "IOS", "u1"), Recipient("t3", "AOS", "u2")]
    msgs = messages_for(page, payload, {("u1", "t1"): "de-CH", ("u2", "t3"): "zh-Hant-HK"})
    assert [m.title for m in msgs] == ["Hallo Kim", "Hello Kim", "你好 Kim"]
    assert messages_for(page, payload, None)[0].title == "Hello Kim"  # no locales read: the default


def test_a_cycle_variant_needs_defaults_like_its_template():
    with pytest.raises(InvalidInput) as err:
        render.check_template(
            "CYCLE",
            render.TemplateContent(
                "Hi {{name}}",
                "b",
                None,
                {"name": "x"},
                None,
                "high",
                render.variants_from_json({"de": {"title": "Hallo {{vorname}}", "body": "b"}}),
            ),
        )
    assert err.value.details[0]["loc"] == ["body", "variants", "de", "title"]
