"""FCM's topic conditions (docs/AUDIENCES.md "Conditions"): the parser, the evaluation of a parsed
condition against a device's topic memberships, and which topics a condition's job walks.

Grammar (FCM's)::

    expr  := and ('||' and)*
    and   := unary ('&&' unary)*
    unary := '!' unary | '(' expr ')' | term
    term  := QUOTED 'in' 'topics'          QUOTED: 'name' or "name"

``&&`` binds tighter than ``||``. At most ``MAX_TOPICS`` distinct topics, each a valid topic path
(``schedule.validate_topic``). A condition true for a device in none of its topics is refused: it
would reach every device of the service (a filter says that). Every error is InvalidInput (422)
whose ``details`` entry names the character position (0-based) where the problem is.

Pure: no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from notee.core.errors import InvalidInput
from notee.domain.schedule import validate_topic

MAX_TOPICS = 5
MAX_LENGTH = 1000  # characters of a condition: five topics of 50 characters and their operators fit easily


@dataclass(frozen=True, slots=True)
class Term:
    topic: str


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]


Node = Term | Not | And | Or


def holds(node: Node, member: Collection[str]) -> bool:
    """Is the condition true for a device subscribed to the topics in ``member``?"""
    if isinstance(node, Term):
        return node.topic in member
    if isinstance(node, Not):
        return not holds(node.operand, member)
    if isinstance(node, And):
        return all(holds(n, member) for n in node.operands)
    return any(holds(n, member) for n in node.operands)


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed condition: its text as given, its distinct topics in order of first appearance, its tree."""

    text: str
    topics: tuple[str, ...]
    root: Node

    def holds(self, member: Collection[str]) -> bool:
        return holds(self.root, member)

    def satisfying(self) -> list[frozenset[str]]:
        """Every set of its topics a device may be in for which the condition is true (at most 2^5)."""
        out = []
        for bits in itertools.product((False, True), repeat=len(self.topics)):
            member = frozenset(t for t, b in zip(self.topics, bits, strict=True) if b)
            if self.holds(member):
                out.append(member)
        return out

    def walked_topics(self, subscribers: Mapping[str, int] | None = None) -> list[str]:
        """The topics the job walks, in walk order: the cheapest set of topics (by ``subscribers``,
        then fewest, then earliest) such that every device the condition is true for is in one of
        them, so walking them meets every recipient. ``'a' in topics && !('b' in topics)`` walks
        ``a`` only; ``'a' in topics || 'b' in topics`` walks both."""
        counts = subscribers or {}
        need = self.satisfying()
        best: tuple[tuple[int, int, tuple[int, ...]], list[str]] | None = None
        for size in range(1, len(self.topics) + 1):
            for combo in itertools.combinations(range(len(self.topics)), size):
                chosen = {self.topics[i] for i in combo}
                if all(m & chosen for m in need):
                    cost = (sum(counts.get(self.topics[i], 0) for i in combo), size, combo)
                    if best is None or cost < best[0]:
                        best = (cost, [self.topics[i] for i in combo])
        assert best is not None  # every topic together always covers (parse refuses the empty membership)
        return best[1]


def _error(text: str, position: int, msg: str, kind: str = "invalid_condition") -> InvalidInput:
    return InvalidInput(
        f"condition: {msg} at position {position}",
        details=[
            {
                "loc": ["body", "condition"],
                "type": kind,
                "msg": f"{msg} at position {position}",
                "ctx": {"position": position, "near": text[position : position + 20]},
            }
        ],
    )


_TOKENS = ("&&", "||", "!", "(", ")")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.topics: list[str] = []

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def peek(self, token: str) -> bool:
        self.skip()
        return self.text.startswith(token, self.pos)

    def take(self, token: str) -> bool:
        if self.peek(token):
            self.pos += len(token)
            return True
        return False

    def expr(self) -> Node:
        parts = [self.conj()]
        while self.take("||"):
            parts.append(self.conj())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def conj(self) -> Node:
        parts = [self.unary()]
        while self.take("&&"):
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def unary(self) -> Node:
        if self.take("!"):
            return Not(self.unary())
        if self.take("("):
            inner = self.expr()
            if not self.take(")"):
                raise _error(self.text, self.pos, "expected ')'")
            return inner
        return self.term()

    def term(self) -> Node:
        self.skip()
        start = self.pos
        if start >= len(self.text):
            raise _error(self.text, start, "expected a topic term ('name' in topics), found the end")
        quote = self.text[start]
        if quote not in "'\"":
            raise _error(self.text, start, "expected a quoted topic name, '!' or '('")
        end = self.text.find(quote, start + 1)
        if end < 0:
            raise _error(self.text, start, "unterminated topic name")
        topic = self.text[start + 1 : end]
        try:
            validate_topic(topic)
        except InvalidInput as exc:
            raise _error(self.text, start + 1, f"invalid topic name ({exc.message})", "invalid_topic") from exc
        self.pos = end + 1
        for word in ("in", "topics"):
            self.skip()
            at = self.pos
            if not self.text.startswith(word, at) or self._word_goes_on(at + len(word)):
                raise _error(self.text, at, f"expected '{word}'")
            self.pos = at + len(word)
        if topic not in self.topics:
            if len(self.topics) == MAX_TOPICS:
                raise _error(self.text, start, f"more than {MAX_TOPICS} distinct topics", "too_many_topics")
            self.topics.append(topic)
        return Term(topic)

    def _word_goes_on(self, at: int) -> bool:
        return at < len(self.text) and (self.text[at].isalnum() or self.text[at] == "_")


def parse_condition(text: str) -> Condition:
    """The condition ``text`` parsed, or InvalidInput (422) naming the offending position."""
    if not isinstance(text, str) or not text.strip():
        raise _error(text if isinstance(text, str) else "", 0, "the condition is empty")
    if len(text) > MAX_LENGTH:
        raise _error(text, MAX_LENGTH, f"longer than {MAX_LENGTH} characters", "too_long")
    bad = next((i for i, ch in enumerate(text) if ch in "\r\n" or (ord(ch) < 0x20 and ch != "\t")), None)
    if bad is not None:
        raise _error(text, bad, "control character")
    parser = _Parser(text)
    root = parser.expr()
    parser.skip()
    if parser.pos != len(text):
        raise _error(text, parser.pos, "unexpected text (expected '&&', '||' or the end)")
    condition = Condition(text, tuple(parser.topics), root)
    if condition.holds(frozenset()):
        raise _error(
            text,
            0,
            "the condition is true for a device in none of its topics (it would reach every device: use a filter)",
            "condition_needs_a_topic",
        )
    return condition
