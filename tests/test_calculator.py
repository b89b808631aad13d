"""The calculator bounds its work before doing it and keeps long work off the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

import ator.tools.builtin as builtin
from ator.errors import ToolError
from ator.tools.base import ToolContext
from ator.tools.builtin import MAX_DIGITS, calculator, evaluate

T = TypeVar("T")
CTX = ToolContext(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), "toolu_1")


async def with_lag(awaitable: Awaitable[T]) -> tuple[T | BaseException, float]:
    """The outcome of `awaitable` and the worst delay a 10 ms ticker saw meanwhile."""
    stop = asyncio.Event()
    worst = 0.0

    async def probe() -> None:
        nonlocal worst
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            started = loop.time()
            await asyncio.sleep(0.01)
            worst = max(worst, loop.time() - started - 0.01)

    ticker = asyncio.create_task(probe())
    await asyncio.sleep(0.02)
    try:
        outcome: T | BaseException = await awaitable
    except ToolError as exc:
        outcome = exc
    stop.set()
    await ticker
    return outcome, worst


async def calculate(expression: Any) -> Any:
    return await calculator.handler({"expression": expression}, CTX)


@pytest.mark.parametrize(
    ("expression", "value"),
    [("(2+3)*4", "20"), ("2**10", "1024"), ("10/4", "2.5"), ("2**-1", "0.5"), ("7 // 2 % 3", "0"),
     ("-(3 - 5)", "2")],
)
async def test_arithmetic_still_works(expression: str, value: str) -> None:
    assert await calculate(expression) == value


async def test_the_blowup_expression_is_refused_quickly_without_blocking_the_loop() -> None:
    started = time.perf_counter()
    outcome, lag = await with_lag(calculate("((9**999)**999)**9"))
    took = time.perf_counter() - started
    assert isinstance(outcome, ToolError)
    assert "result too large" in outcome.message
    assert took < 1.0 and lag < 0.1, (took, lag)


@pytest.mark.parametrize(
    "expression",
    ["9**9**9**9", f"10**{MAX_DIGITS}", f"(10**{MAX_DIGITS // 2})*(10**{MAX_DIGITS // 2 + 1})",
     "(-7)**100000", f"2**{4 * MAX_DIGITS}"],
)
def test_results_over_the_digit_limit_are_refused_before_they_are_computed(
    expression: str,
) -> None:
    started = time.perf_counter()
    with pytest.raises(ToolError, match="result too large"):
        evaluate(expression)
    assert time.perf_counter() - started < 0.05


def test_the_largest_allowed_results_are_computed_and_printable() -> None:
    assert len(evaluate(f"10**{MAX_DIGITS - 1}")) == MAX_DIGITS
    assert len(evaluate(f"(10**{MAX_DIGITS // 2})*(10**{MAX_DIGITS // 2 - 1})")) == MAX_DIGITS


@pytest.mark.parametrize(
    ("expression", "reason"),
    [("1.5**10000", "cannot evaluate"), ("1/0", "cannot evaluate"), ("(" * 600 + "1" + ")" * 600,
     "longer than"), ("__import__('os')", "unsupported"), ("True + 1", "unsupported"),
     ("1j * 2", "unsupported")],
)
def test_what_is_not_arithmetic_is_a_tool_error(expression: str, reason: str) -> None:
    with pytest.raises(ToolError, match=reason):
        evaluate(expression)


async def test_a_non_string_expression_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="must be a string"):
        await calculate(42)


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Recording wrapper around the real evaluation: which thread did the work?"""
    threads: list[int] = []

    def recording(expression: str) -> str:
        threads.append(threading.get_ident())
        return evaluate(expression)

    monkeypatch.setattr(builtin, "evaluate", recording)
    return threads


async def test_a_long_expression_is_evaluated_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads = _recording(monkeypatch)
    expression = f"10**{MAX_DIGITS - 1}" + " + 0" * builtin.INLINE_CHARS
    assert len(expression) > builtin.INLINE_CHARS
    assert len(await calculate(expression)) == MAX_DIGITS
    assert len(threads) == 1 and threads[0] != threading.get_ident()


async def test_a_short_expression_is_evaluated_on_the_loop_without_a_thread_hop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hop cost 0.12 ms a call, more than the work itself (a bench turn's one tool)."""
    threads = _recording(monkeypatch)
    assert await calculate("6*7") == "42"
    assert threads == [threading.get_ident()]


async def test_the_costliest_short_expressions_stay_short_on_the_loop() -> None:
    """Full-size powers, as many as fit in INLINE_CHARS, each refused or computed with the
    text of a result near MAX_DIGITS digits: the loop is never held for long."""
    worst = ("9**4190//7**3999+9**4190%7**3999+9**4190-3**8000",
             "(9**2095)**2*1//1//1//1//1//1//1//1//1//1//1//1",
             "9**4190*9**4190*9**4190*9**4190*9**4190*9**4190")
    for expression in worst:
        assert len(expression) <= builtin.INLINE_CHARS
        _outcome, lag = await with_lag(calculate(expression))
        assert lag < 0.05, (expression, lag)
