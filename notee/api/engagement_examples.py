"""The OpenAPI examples of the engagement schemas (``notee/api/routes/engagement.py``), merged into
``openapi_examples.EXAMPLES``; tests/integration/test_api_openapi.py validates each against its schema."""

from __future__ import annotations

from typing import Any

_NID = "9f0c2d1e4b5a46c7a8b9c0d1e2f3a4b5.q3xV0bYt9kA"
_COUNTS = {
    "targeted": 1000,
    "sent": 980,
    "delivered": 950,
    "opened": 210,
    "clicked": 40,
    "dismissed": 300,
    "delivery_rate": 0.9694,
    "open_rate": 0.2143,
    "click_rate": 0.0408,
}
_RECEIPT = {"notification_id": _NID, "event": "opened", "at": "2026-12-05T09:03:10+09:00"}
_RECORD = {
    "notification_id": _NID,
    "event": "clicked",
    "action": "track",
    "at": "2026-12-05T00:03:10Z",
    "received": "2026-12-05T00:03:11.250000Z",
}

EXAMPLES: dict[str, Any] = {
    "ReceiptIn": _RECEIPT,
    "ReceiptsIn": {"events": [_RECEIPT | {"event": "delivered"}, _RECEIPT | {"event": "clicked", "action": "track"}]},
    "RejectedOut": {"index": 2, "notification_id": "0" * 32 + ".AAAAAAAAAAA", "reason": "not_found"},
    "ReceiptsOut": {
        "accepted": 2,
        "duplicates": 0,
        "rejected": [{"index": 2, "notification_id": "0" * 32 + ".AAAAAAAAAAA", "reason": "not_found"}],
    },
    "CountsOut": _COUNTS,
    "JobStatsOut": {"job_id": "9f0c2d1e-4b5a-46c7-a8b9-c0d1e2f3a4b5", "type": "news", "counts": _COUNTS},
    "ScopeRowOut": {"key": "2026-12-05", "counts": _COUNTS},
    "ScopeStatsOut": {
        "by": "day",
        "from": "2026-11-06",
        "to": "2026-12-05",
        "jobs_truncated": False,
        "items": [{"key": "2026-12-05", "counts": _COUNTS}],
    },
    "ReceiptRowOut": _RECORD,
    "ReceiptPage": {"items": [_RECORD], "next_cursor": None},
}
