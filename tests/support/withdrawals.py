"""What the durable-withdrawal tests share (docs/RELIABILITY.md "Found by the chaos run"): the devices a
topic's slot rows name, the kept withdrawal records of a user, and a batch that is never answered
because its process died."""

from __future__ import annotations

from sqlalchemy import text

from notee.core.vocabulary import Recipient, TopicTarget
from notee.store.cql.counters import max_slot
from notee.store.cql.recipients import stream_recipients


class ProcessDied(BaseException):
    """The API process killed while its batch is unanswered: no handler of the writer runs after it."""


class Unanswered:
    """A batch's future that never answers (the coordinator keeps it in its batchlog)."""

    def add_callbacks(self, *callbacks: object) -> None:
        pass

    def result(self) -> None:
        raise ProcessDied()


def recipients(st, key, service, topic):
    """Every recipient of ``topic`` (type ``news``) as the fan-out reads them, slot by slot."""
    out = []
    for slot in range(max_slot(st, service, "TOPIC", "news") + 1):
        for page, _ in stream_recipients(st, key, TopicTarget(topic), slot, 100):
            out += map(Recipient._make, page)
    return out


def kept(runtime, service, user_id):
    """The states of the user's kept withdrawal records (``subscription_withdrawal``)."""
    with runtime.sessions() as s:
        sql = text("SELECT state FROM subscription_withdrawal WHERE service = :s AND user_id = :u")
        return s.execute(sql, {"s": service, "u": user_id}).scalars().all()
