"""python-liquid is pinned exactly (pyproject.toml) because notee/domain/liquid.py replaces one of its
internals, ``RangeLiteral._make_range``, to bound range literals (docs/TEMPLATES.md): a new release
may rename it or change what it returns, and the bound would then silently stop applying."""

from __future__ import annotations

import inspect

from liquid.builtin.expressions.primitive import RangeLiteral

from notee.domain import liquid as notee_liquid
from tests.support.pins import Detour

LIQUID_RANGE = Detour(
    "the range-literal bound replaces RangeLiteral._make_range (notee/domain/liquid.py)",
    ("python-liquid",),
    "diff liquid/builtin/expressions/primitive.py (RangeLiteral.evaluate, evaluate_async, _make_range) "
    "between the two versions; run tests/unit/test_templates_logic.py",
)


def test_python_liquid_is_pinned_to_the_installed_version() -> None:
    LIQUID_RANGE.assert_pinned_to_installed()


def test_the_replaced_internal_is_the_one_the_evaluation_calls() -> None:
    assert RangeLiteral._make_range is notee_liquid._bounded_range, LIQUID_RANGE.loud("the bound is not installed")
    original = inspect.signature(notee_liquid._make_range)
    assert list(original.parameters) == ["self", "start", "stop"], LIQUID_RANGE.loud(f"_make_range is now {original}")
    for method in (RangeLiteral.evaluate, RangeLiteral.evaluate_async):
        assert "self._make_range(" in inspect.getsource(method), LIQUID_RANGE.loud(
            f"{method.__name__} no longer makes its range through _make_range"
        )
