"""A locale variant's own subtitle (notee/domain/payload_variants.py): checked, rendered and applied
to the payload of that variant's recipients; pure."""

from __future__ import annotations

import pytest

from notee.core.errors import InvalidInput
from notee.domain import payload_variants, render


def _content(subtitle: str | None, defaults: dict[str, str] | None = None) -> render.TemplateContent:
    variants = {"de": render.Variant("t", "b", None, subtitle), "fr": render.Variant("t", "b")}
    return render.TemplateContent("t", "b", None, defaults, None, "high", variants)


def test_for_variant_replaces_only_the_subtitle_and_keeps_the_rest():
    spec = {"badge": 1, "ios": {"thread_id": "x", "subtitle": "en"}}
    assert payload_variants.for_variant(spec, "de") == {"badge": 1, "ios": {"thread_id": "x", "subtitle": "de"}}
    assert spec["ios"]["subtitle"] == "en"  # the job's payload is shared: never changed in place
    assert payload_variants.for_variant(spec, None) == spec
    assert payload_variants.for_variant(None, "de") == {"ios": {"subtitle": "de"}}
    assert payload_variants.for_variant(None, None) is None


def test_subtitles_render_with_variables_then_defaults():
    content = _content("{{n}} neu, {{who}}", {"who": "du"})
    assert payload_variants.render_subtitles(content, {"n": "3"}) == {"de": "3 neu, du"}
    assert payload_variants.render_subtitles(_content(None), {}) == {}


def test_a_cycle_subtitle_without_default_and_a_bad_one_name_the_variant():
    with pytest.raises(InvalidInput) as caught:
        payload_variants.check("CYCLE", _content("{{n}} neu"))
    assert caught.value.details[0]["loc"] == ["body", "variants", "de", "subtitle"]
    with pytest.raises(InvalidInput) as caught:
        payload_variants.check("TOPIC", _content("{{ a b }}"))
    assert caught.value.details[0]["loc"] == ["body", "variants", "de", "subtitle"]
    assert payload_variants.check("TOPIC", _content("{{n}} neu")) == {"n"}


def test_with_missing_lists_what_both_miss_once():
    def first() -> None:
        raise InvalidInput("m", details=[{"loc": ["body", "variables", "a"], "type": "missing"}])

    def second() -> None:
        raise InvalidInput(
            "m",
            details=[
                {"loc": ["body", "variables", "a"], "type": "missing"},
                {"loc": ["body", "variables", "b"], "type": "missing"},
            ],
        )

    with pytest.raises(InvalidInput) as caught:
        payload_variants.with_missing(first, second)
    assert [d["loc"][-1] for d in caught.value.details] == ["a", "b"]
    assert payload_variants.with_missing(lambda: 1, lambda: 2) == (1, 2)
