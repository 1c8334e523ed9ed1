"""Rules the domain checks, as the OpenAPI document states them, so that a client generated from the
document refuses what the server would (issue 37): the text rule of every text field, the limits of
data and defaults maps, a topic, a Firebase service account.

Only the document says them: pydantic does not check them a second time. The domain's check stays
the one that answers (its 422 and its details), and so does ``TopicSubscribeShortcut``, which answers
topic subscribes without FastAPI. tests/integration/test_api_constraints.py sends, for each, a value
the document refuses (the server answers 422) and one it accepts (not refused for that reason).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Path
from pydantic import Field, GetJsonSchemaHandler, StrictStr
from pydantic.json_schema import JsonSchemaValue

from notee.core.vocabulary import GOOGLE_TOKEN_URI
from notee.domain import render
from notee.domain.rules import (
    FCM_PROJECT_ID_PATTERN,
    MAX_DATA_KEY_LEN,
    MAX_DATA_KEYS,
    MAX_DATA_VALUE_LEN,
    MAX_PEM_LEN,
    MAX_VARIANTS,
    MULTI_LINE_PATTERN,
    ONE_LINE_PATTERN,
)
from notee.domain.schedule import TOPIC_MAX, topic_pattern
from notee.domain.tags import MAX_TAG_STR_LEN, TAG_KEY_PATTERN


def merge_schema(schema: dict[str, Any], keywords: Mapping[str, Any]) -> None:
    """Add ``keywords`` to ``schema``, into its subschemas where both hold one; a keyword the schema
    already has keeps its value (a pattern pydantic checks says more than the text rule)."""
    for key, value in keywords.items():
        present = schema.get(key)
        if isinstance(present, dict) and isinstance(value, Mapping):
            merge_schema(present, value)
        elif key not in schema:
            schema[key] = copy.deepcopy(value)


@dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: typing hashes Annotated metadata
class Documented:
    """``Annotated`` metadata: JSON Schema keywords for the field's schema in the document only."""

    keywords: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, **keywords: Any) -> Documented:
        return cls(tuple(keywords.items()))

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        merge_schema(handler.resolve_ref_schema(schema), dict(self.keywords))
        return schema


def _text(max_length: int, pattern: str, min_length: int = 0) -> dict[str, Any]:
    least = {"minLength": min_length} if min_length else {}
    return {"type": "string", **least, "maxLength": max_length, "pattern": pattern}


# A text field the domain checks with ``check_text``: no control characters (multi-line: but "\n").
OneLine = Annotated[StrictStr, Documented.of(pattern=ONE_LINE_PATTERN)]
MultiLine = Annotated[StrictStr, Documented.of(pattern=MULTI_LINE_PATTERN)]

# ``check_pem``: an APNs .p8 key's text (whether it is a key is for the server to say).
PemKey = Annotated[StrictStr, Documented.of(minLength=1, pattern=MULTI_LINE_PATTERN)]

# ``check_data``: a template's (or a variant's) data, and a single send's.
DATA = Documented.of(
    maxProperties=MAX_DATA_KEYS,
    propertyNames=_text(MAX_DATA_KEY_LEN, ONE_LINE_PATTERN, min_length=1),
    additionalProperties=_text(MAX_DATA_VALUE_LEN, MULTI_LINE_PATTERN),
)
DataMap = Annotated[dict[StrictStr, StrictStr], DATA]

# ``render.check_template``'s defaults: placeholder names, bounded values. (That a value holds no
# "{{" or "}}" the document leaves to the description.)
DEFAULTS = Documented.of(
    maxProperties=render.MAX_DEFAULTS,
    propertyNames={"pattern": f"^{render.NAME_PATTERN}$"},
    additionalProperties=_text(render.MAX_DEFAULT_LEN, MULTI_LINE_PATTERN),
)
DefaultsMap = Annotated[dict[StrictStr, StrictStr], DEFAULTS]

VARIANTS = Documented.of(maxProperties=MAX_VARIANTS)

# ``rules.check_fcm_service_account``. Its token_uri is Google's; with NOTEE_EMULATOR_URL set the
# emulator's is accepted too, which a document cannot know. (Its size and whether private_key is a
# key are for the server to say.)
FCM_SERVICE_ACCOUNT = Documented.of(
    required=["type", "project_id", "client_email", "private_key", "token_uri"],
    properties={
        "type": {"const": "service_account"},
        "project_id": {"type": "string", "pattern": FCM_PROJECT_ID_PATTERN},
        "client_email": _text(320, ONE_LINE_PATTERN, min_length=1),
        "private_key": _text(MAX_PEM_LEN, MULTI_LINE_PATTERN, min_length=1),
        "token_uri": {"const": GOOGLE_TOKEN_URI},
    },
)

# A topic in a path: ``validate_topic``'s rule, and no "/", which no path segment carries (%2F is
# decoded before routing, so such a topic would name another route).
TopicPath = Annotated[
    str,
    Path(
        description=f"Topic, 1-{TOPIC_MAX} characters, not blank, no control or format characters, no '/' "
        "(URL-encoded).",
        json_schema_extra={"minLength": 1, "maxLength": TOPIC_MAX, "pattern": topic_pattern("/")},
    ),
]

# ``notee.domain.tags``: a user's tags (a replacement), and a merge patch of them (null removes a key).
_TAG_VALUE: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "maxLength": MAX_TAG_STR_LEN, "pattern": ONE_LINE_PATTERN},
        {"type": "number"},
        {"type": "boolean"},
        {
            "type": "object",
            "properties": {"timestamp": {"type": "string", "format": "date-time"}},
            "required": ["timestamp"],
            "additionalProperties": False,
        },
    ]
}
TAGS = Documented.of(propertyNames={"pattern": TAG_KEY_PATTERN}, additionalProperties=_TAG_VALUE)
TAGS_PATCH = Documented.of(
    propertyNames={"pattern": TAG_KEY_PATTERN}, additionalProperties={"anyOf": [*_TAG_VALUE["anyOf"], {"type": "null"}]}
)
# notee.domain.payloads checks the rich fields (its 422 names the field); the document says what
# they are and shows one (docs/PAYLOADS.md has the table and one example per kind).
PAYLOAD_DESCRIPTION = (
    "Rich push fields (docs/PAYLOADS.md): kind (alert | background), image (https URL), sound (a name, or "
    "null for none; absent: APNs plays default), badge (0 clears), click_action, link (deep link), category "
    "(action buttons), collapse_key, analytics_label, android {channel_id, icon, color, tag, visibility, "
    "notification_priority, notification_count}, ios {thread_id, mutable_content, content_available, "
    "interruption_level, relevance_score, target_content_id, subtitle, launch_image}, override {android, "
    "apns} (raw keys Notee does not set). image, link and ios.subtitle take placeholders. A background push "
    "has no title, body, sound or badge (422 otherwise)."
)
PAYLOAD_EXAMPLES: list[Any] = [
    {
        "image": "https://cdn.example.com/p/42.jpg",
        "badge": 3,
        "category": "ORDER",
        "link": "shop://orders/{{order_id}}",
        "android": {"channel_id": "orders", "color": "#3366FF"},
        "ios": {"thread_id": "orders", "interruption_level": "time-sensitive"},
    },
    {"kind": "background", "collapse_key": "sync"},
]
PayloadObject = dict[StrictStr, Any]


def payload_field(merged: bool = False) -> Any:
    """The ``payload`` field of a template (``merged``: of a publish or send, over the template's)."""
    prefix = "Rich fields merged over the template's (android, ios and override one level deeper). " if merged else ""
    return Field(None, description=prefix + PAYLOAD_DESCRIPTION, examples=PAYLOAD_EXAMPLES)
