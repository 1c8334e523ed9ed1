"""Templates with logic (notee/domain/liquid.py, render.py, personal.py; docs/TEMPLATES.md):
conditionals, loops over list variables, filters, numbers, dates and plurals in a locale and time
zone, every missing name in one 422, recipient-dependent templates rendered per recipient (cached by
what they read), and hostile templates refused or stopped by the engine's limits."""

from __future__ import annotations

import time

import pytest

from notee.core.errors import InvalidInput
from notee.core.vocabulary import Recipient
from notee.domain import liquid, render
from notee.domain.personal import Personalizer
from notee.domain.rules import check_send_inputs
from notee.worker.messages import messages_for


def content(
    title: str = "t",
    body: str = "b",
    data: dict[str, str] | None = None,
    defaults: dict[str, str] | None = None,
    variants: dict[str, render.Variant] | None = None,
) -> render.TemplateContent:
    return render.TemplateContent(title, body, data, defaults, None, "high", variants)


def body_of(body: str, variables: dict[str, object] | None = None, scope: liquid.Scope | None = None) -> str:
    return render.render(content(body=body), variables, None, scope).body


@pytest.mark.parametrize(
    "body, variables, expected",
    [
        ("{% if vip == 'yes' %}VIP {% endif %}{{ name }}", {"vip": "yes", "name": "Ann"}, "VIP Ann"),
        ("{% if vip %}VIP {% else %}Hi {% endif %}{{ name }}", {"name": "Ann"}, "Hi Ann"),
        ("{% unless n == '0' %}{{ n }} new{% endunless %}", {"n": "2"}, "2 new"),
        ("{% case plan %}{% when 'pro' %}Pro{% else %}Free{% endcase %}", {"plan": "pro"}, "Pro"),
        (
            "{% for i in items %}{{ i }}{% unless forloop.last %}, {% endunless %}{% endfor %}",
            {"items": ["a", "b"]},
            "a, b",
        ),
        (
            "{% for i in items %}{{ i.name }} {{ i.price }}€;{% endfor %}",
            {"items": [{"name": "Tea", "price": "4"}]},
            "Tea 4€;",
        ),
        ("{{ items.size }} items", {"items": ["a", "b", "c"]}, "3 items"),
        ("{{ name | default: 'there' }}", {}, "there"),
        ("{{ name | upcase }} {{ name | downcase }} {{ name | capitalize }}", {"name": "aNN"}, "ANN ann Ann"),
        ("{{ s | truncate: 8 }}", {"s": "Hello wonderful world"}, "Hello..."),
        ("{{ user.name }}", {"user.name": "Ann"}, "Ann"),
    ],
)
def test_conditionals_loops_and_filters(body, variables, expected):
    assert body_of(body, variables) == expected


@pytest.mark.parametrize(
    "body, locale, expected",
    [
        ("{{ n | number }}", "en", "1,234,567.5"),
        ("{{ n | number }}", "de", "1.234.567,5"),
        ("{{ n | number: 2 }}", "fr", "1\u202f234\u202f567,50"),
        ("{{ one | plural: 'message', 'messages' }}", "en", "message"),
        ("{{ n | plural: '# message', '# messages' }}", "en", "1,234,567.5 messages"),
        ("{{ few | plural: one: '# файл', few: '# файла', many: '# файлов', other: '# файла' }}", "ru", "3 файла"),
        ("{{ many | plural: one: '# файл', few: '# файла', many: '# файлов', other: '# файла' }}", "ru", "5 файлов"),
        ("{{ few | plural: one: '# Datei', other: '# Dateien' }}", "de", "3 Dateien"),
    ],
)
def test_numbers_and_plurals_in_the_locale(body, locale, expected):
    values = {"n": "1234567.5", "one": "1", "few": "3", "many": "5"}
    assert body_of(body, values, liquid.Scope(locale=locale)) == expected


def test_dates_in_the_recipients_time_zone_and_locale():
    at = {"at": "2026-12-05T23:30:00Z"}
    seoul = liquid.Scope({"timezone": "Asia/Seoul", "locale": "ko-KR"})
    assert body_of("{{ at | datetime: 'date:long' }}", at, seoul) == "2026년 12월 6일"  # the next day in Seoul
    berlin = liquid.Scope({"timezone": "Europe/Berlin", "locale": "de-DE"})
    assert body_of("{{ at | datetime: 'short' }}", at, berlin) == "06.12.26, 00:30"
    ny = liquid.Scope({"timezone": "America/New_York", "locale": "en-US"})
    assert body_of("{{ at | datetime: 'time:short' }}", at, ny) == "6:30\u202fPM"
    assert body_of("{{ at | datetime: 'EEE d MMM HH:mm' }}", {"at": "1764977400"}, berlin) == "Sa. 6 Dez. 00:30"


def test_every_name_output_and_missing_is_reported_at_once_but_tests_and_defaults_are_free():
    with pytest.raises(InvalidInput) as err:
        render.render(
            content(
                title="{% if promo %}{{ promo }}{% endif %}{{ a | upcase }}",
                body="{% for i in items %}{{ i }}{% endfor %}{{ user.name }}{{ b | default: 'x' }}",
                data={"k": "{{ c }}"},
            ),
            {},
        )
    assert [d["loc"] for d in err.value.details] == [["body", "variables", n] for n in ("a", "items", "user.name", "c")]
    assert err.value.details[0]["type"] == "missing"


@pytest.mark.parametrize(
    "text, says",
    [
        ("{% if a %}x", "expected"),  # unclosed block
        ("{{ a | nope }}", "unknown filter nope"),
        ("{% include 'x' %}", "unexpected tag 'include'"),
        ("{% tablerow i in a %}{% endtablerow %}", "unexpected tag 'tablerow'"),
        ("{{ recipient.password }}", "recipient.password is not one of"),
        ("{{ 'x' }}", "shows no value"),
        ("a %} b", "outside of"),
        ("{{ a-b }}", "letters, digits and _"),
    ],
)
def test_a_template_the_engine_refuses_is_a_422_naming_the_field_with_a_readable_message(text, says):
    with pytest.raises(InvalidInput) as err:
        render.check_template("TOPIC", content(body=text))
    detail = err.value.details[0]
    assert detail["loc"] == ["body", "body"] and detail["type"] == "invalid_placeholder"
    assert says in detail["msg"] and "\n" not in detail["msg"] and "^" not in detail["msg"]


def test_a_cycle_template_needs_a_default_for_every_name_but_recipient_ones():
    render.check_template(
        "CYCLE", content(body="{% if n %}{{ n }}{% endif %} {{ recipient.name }}", defaults={"n": "1"})
    )
    with pytest.raises(InvalidInput) as err:
        render.check_template("CYCLE", content(body="{% for i in items %}{{ i }}{% endfor %}"))
    assert err.value.details[0]["type"] == "missing_default" and "items" in err.value.details[0]["msg"]


def test_a_filter_given_bad_input_is_a_422_naming_the_field():
    with pytest.raises(InvalidInput) as err:
        render.render(content(title="{{ n | number }}"), {"n": "many"})
    assert err.value.details[0]["loc"] == ["body", "title"] and "not a number" in err.value.details[0]["msg"]


def test_values_are_inserted_as_they_are_never_rendered():
    assert body_of("{{ a }}", {"a": "{% if x %}y{% endif %}"}) == "{% if x %}y{% endif %}"


def test_list_variables_are_checked():
    check_send_inputs({"items": ["a", {"name": "b"}]}, None)
    with pytest.raises(InvalidInput):
        check_send_inputs({"items": ["a"] * 51}, None)
    with pytest.raises(InvalidInput):
        check_send_inputs({"items": [{"k": "x\x00"}]}, None)
    with pytest.raises(InvalidInput):  # the recipient's own names are not variables
        check_send_inputs({"recipient.name": "Eve"}, None)


# --- hostile templates: refused when saved, or stopped by a limit when rendered (a 422, quickly) ---


@pytest.mark.parametrize(
    "body, says",
    [
        ("{% for i in (1..1000000000) %}x{% endfor %}", "a range of more than 1000 numbers"),
        ("{% assign r = (1..1000000000) %}{{ r | join: ',' | size }}", "a range of more than 1000 numbers"),
        ("{% for i in (1..n) %}x{% endfor %}", "a range of more than 1000 numbers"),
        ("{% for i in (1..40) %}{% for j in (1..40) %}x{% endfor %}{% endfor %}", "loop iteration limit"),
        ("{% for i in (1..999) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}", "output stream limit"),
        ("{% assign s = 'xx' %}{% for i in (1..60) %}{% assign s = s | append: s %}{% endfor %}", "append made more"),
        (
            "{% for i in (1..900) %}{% assign a = a | append: '0123456789' %}"
            "{% assign b = b | append: '0123456789' %}{% endfor %}",
            "namespace limit",
        ),
        ("{{ n | replace: '9', n | replace: '9', n | replace: '9', n }}", "replace would make more"),
        (
            "{{ n | split: '' | join: '----------------------------------------------------------' | split: '' | join: n }}",
            "join made more",
        ),
        ("{% capture s %}{% for i in (1..999) %}abcdefghijklmnopq{% endfor %}{% endcapture %}", "limit"),
    ],
)
def test_hostile_templates_hit_a_limit(body, says):
    render.check_template("TOPIC", content(body=body))  # they parse
    with pytest.raises(InvalidInput) as err:
        render.render(content(body=body), {"n": "9" * 100, "a": "", "b": ""})
    assert says in err.value.details[0]["msg"]


# A loop of filter chains each within every count limit: about 12 s of CPU on this machine unbounded.
SLOW = (
    "{% capture s %}{% for i in (1..400) %}abcdefghij{% endfor %}{% endcapture %}"
    "{% for i in (1..999) %}{% assign t = s | split: '' | join: ',' | split: ',' | join: '' | split: '' "
    "| join: ',' | split: ',' | join: '' | upcase | downcase | split: '' | join: ',' | split: ',' | join: '' %}"
    "{% endfor %}{{ t | size }}"
)


def test_a_template_that_runs_long_is_stopped_at_the_time_limit_with_a_422():
    render.check_template("TOPIC", content(body=SLOW))  # it parses and passes every static rule
    started = time.thread_time()  # the limit is on the rendering thread's CPU time
    with pytest.raises(InvalidInput) as err:
        render.render(content(body=SLOW))
    took = time.thread_time() - started
    assert err.value.details[0]["loc"] == ["body", "body"]
    assert err.value.details[0]["msg"] == f"the render took longer than {liquid.TIME_LIMIT_S:g} s"
    assert took < liquid.TIME_LIMIT_S + 1.0, took  # stopped, not left to run for seconds


def test_a_recipient_text_that_runs_long_gets_the_fallback_and_the_job_stops_rendering_per_recipient():
    # fast for the job's own render (an empty recipient), slow for a named one
    body = "{% if recipient.name != '' %}" + SLOW + "{% endif %}{{ recipient.name | default: 'there' }}"
    payload = render.render_all(content(body=body)).as_job_payload()
    assert payload["body"] == "there"
    personal = Personalizer(payload)
    started = time.thread_time()
    got = [personal.text_for(("en", "UTC", f"user {i}", str(i), None))[1] for i in range(20)]
    assert got == ["there"] * 20
    assert personal.slow and time.thread_time() - started < liquid.TIME_LIMIT_S + 1.0  # one slow render, not 20


def test_deep_nesting_is_refused_when_saved():
    deep = "{% if a %}" * 12 + "x" + "{% endif %}" * 12
    with pytest.raises(InvalidInput) as err:
        render.check_template("TOPIC", content(body=deep))
    assert "nesting" in err.value.details[0]["msg"]


@pytest.mark.parametrize(
    "body", ["{{ x.__class__ }}", "{{ x['__class__'] }}", "{{ x.__init__.__globals__ }}", "{{ x.upper }}"]
)
def test_no_python_attribute_is_reachable(body):
    # Only item lookups: a Python attribute is a missing value, never the object's internals.
    with pytest.raises(InvalidInput) as err:
        render.render(content(body=body), {"x": "abc"})
    assert err.value.details[0]["type"] == "missing"


# --- recipient-dependent templates ---


def test_templates_reading_the_recipient_or_a_date_depend_on_it():
    assert not render.depends_on_recipient(content(body="Hi {{ name }} {{ n | number }} {{ n | plural: 'a', 'b' }}"))
    assert render.depends_on_recipient(content(body="Hi {{ recipient.name }}"))
    assert render.depends_on_recipient(content(body="At {{ at | datetime }}"))
    variant = {"de": render.Variant("t", "Hallo {{ recipient.name }}")}
    assert render.depends_on_recipient(content(body="Hi", variants=variant))


def test_a_plain_job_has_no_personal_part_and_a_recipient_one_carries_its_sources():
    plain = render.render_all(content(body="Hi {{ name }}"), {"name": "Ann"}).as_job_payload()
    assert "personal" not in plain and plain["body"] == "Hi Ann"
    tpl = content(
        body="Hi {{ recipient.name | default: 'there' }}, {{ n }}",
        variants={"de": render.Variant("T", "Hallo {{ recipient.name | default: 'du' }}, {{ n }}")},
    )
    payload = render.render_all(tpl, {"n": "3"}, {"title": "Now"}).as_job_payload()
    assert payload["body"] == "Hi there, 3" and payload["variants"]["de"]["body"] == "Hallo du, 3"  # the fallback
    assert payload["personal"]["values"] == {"n": "3"}
    assert payload["personal"]["texts"][""]["title"] == "Now"  # overrides apply to the sources too


def test_each_recipient_gets_its_text_rendered_once_per_distinct_profile():
    tpl = content(
        title="{{ at | datetime: 'time:short' }}",
        body="Hi {{ recipient.name | default: 'there' }}",
        variants={"de": render.Variant("{{ at | datetime: 'time:short' }}", "Hallo {{ recipient.name }}")},
    )
    payload = render.render_all(tpl, {"at": "2026-12-05T12:00:00Z"}).as_job_payload()
    page = [Recipient("t1", "AOS", "u1"), Recipient("t2", "IOS", "u2"), Recipient("t3", "AOS", "u3")]
    profiles = {
        ("u1", "t1"): ("de-AT", "Europe/Vienna", "Anna", "a", None),
        ("u2", "t2"): ("en-US", "America/New_York", "", "b", None),
    }
    got = [(m.title, m.body) for m in messages_for(page, payload, profiles)]
    assert got == [("13:00", "Hallo Anna"), ("7:00\u202fAM", "Hi there"), ("12:00\u202fPM", "Hi there")]


def test_a_template_reading_only_the_time_zone_renders_once_per_zone_and_locale():
    payload = render.render_all(content(body="{{ at | datetime }}"), {"at": "2026-12-05T12:00:00Z"}).as_job_payload()
    personal = Personalizer(payload)
    for i in range(100):
        personal.text_for(("en", "Asia/Seoul" if i % 2 else "UTC", f"user {i}", str(i), None))
    assert len(personal.cache) == 2  # the name is not part of the key: the template does not read it


def test_a_recipient_whose_text_does_not_render_gets_the_jobs_text():
    payload = render.render_all(content(body="{{ recipient.name }}{{ x }}"), {"x": "y" * 2000}).as_job_payload()
    huge = ("en", "UTC", "n" * 3000, "id", None)  # over the providers' 4,096 bytes with the name
    assert Personalizer(payload).text_for(huge)[1] == "y" * 2000


def test_recipient_tags_are_read_and_a_tag_the_user_lacks_is_nil_not_missing():
    tpl = content(body="{% if recipient.tags.vip %}VIP {% endif %}{{ recipient.tags.plan | default: 'free' }}")
    payload = render.render_all(tpl).as_job_payload()
    assert payload["personal"]["fields"] == ["tags"] and payload["body"] == "free"
    personal = Personalizer(payload)
    assert personal.text_for(("en", "UTC", "a", "1", {"vip": True, "plan": "pro"}))[1] == "VIP pro"
    assert personal.text_for(("en", "UTC", "b", "2", {})) == (payload["title"], "free", {})
    assert personal.text_for(("en", "UTC", "c", "3", {"vip": True, "plan": "pro"}))[1] == "VIP pro"
    assert len(personal.cache) == 2  # keyed by the tags, not by the name the template does not read
