"""Bounds on free-form JSON and text (security/limits.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ator.errors import ValidationFailed
from ator.security.limits import (
    SETUP_CONFIG,
    THREAD_METADATA,
    JsonLimits,
    check_json,
    check_text,
)


def nested(depth: int) -> dict[str, Any]:
    """An object `depth` levels deep: {"a": {"a": ... {}}}."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def refusal(value: Any, limits: JsonLimits, loc: tuple[str, ...] = ("metadata",)
            ) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as err:
        check_json(value, limits, loc)
    assert err.value.status == 422
    return err.value


def test_depth_is_bounded_and_the_path_is_named() -> None:
    check_json(nested(16), THREAD_METADATA, ("metadata",))
    err = refusal(nested(17), THREAD_METADATA)
    assert err.code == "too_deep"
    assert err.errors[0]["loc"] == ["metadata", *["a"] * 16]
    assert err.message.startswith("metadata.a.a")
    # Lists count as levels too.
    assert refusal({"a": [[[[]]]]}, JsonLimits(max_bytes=100, max_depth=4)).code == "too_deep"


@pytest.mark.parametrize("depth", [500, 999, 100_000])
def test_very_deep_values_are_refused_without_recursion(depth: int) -> None:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    assert refusal({"x": value}, SETUP_CONFIG, ("config",)).code == "too_deep"


def test_size_is_bounded() -> None:
    check_json({"k": "x" * 60_000}, THREAD_METADATA, ("metadata",))
    err = refusal({"k": "x" * (10 * 1024 * 1024)}, THREAD_METADATA)
    assert err.code == "too_large" and err.errors[0]["loc"] == ["metadata"]
    # Many small values add up; non-ASCII counts as its UTF-8 bytes.
    assert refusal({str(i): "y" * 100 for i in range(1000)}, THREAD_METADATA).code == "too_large"
    assert refusal({"k": "é" * 40_000}, THREAD_METADATA).code == "too_large"
    # A giant integer is bounded without formatting it.
    check_json({"n": 10**5000}, SETUP_CONFIG, ("config",))


def test_count_and_string_bounds() -> None:
    assert refusal(list(range(3000)), THREAD_METADATA).code == "too_many_items"
    limits = JsonLimits(max_bytes=10_000, max_depth=4, max_string=10)
    err = refusal({"k": "x" * 11}, limits)
    assert err.code == "too_large" and err.errors[0]["loc"] == ["metadata", "k"]
    assert refusal({"x" * 11: 1}, limits).code == "too_large"


@pytest.mark.parametrize("value", [
    {"k": "a\x00b"}, {"a\x00": 1}, {"k": float("nan")}, {"k": float("inf")},
    {"k": -float("inf")}, {"k": {1, 2}}, {"k": b"bytes"}, {1: "int key"},
])
def test_unstorable_values_are_refused(value: Any) -> None:
    assert refusal(value, SETUP_CONFIG).code == "unstorable_value"


def test_text_bounds() -> None:
    check_text("x" * 500, ("title",), 500)
    with pytest.raises(ValidationFailed) as err:
        check_text("x" * 501, ("title",), 500)
    assert err.value.code == "too_long" and err.value.errors[0]["loc"] == ["title"]
    with pytest.raises(ValidationFailed) as nul:
        check_text("a\x00", ("title",), 500)
    assert nul.value.code == "unstorable_value"
