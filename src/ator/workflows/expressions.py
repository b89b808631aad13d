"""JSONata expressions, bounded and off the event loop (layer: workflows; imports jsonata,
ator.errors).

Recipes compute with JSONata (`jsonata-python`, a pure-Python port of the reference
implementation), never with `eval`. Every evaluation runs on a small thread pool, so a slow
expression never blocks the loop, under JSONata's own time box (a runaway loop or recursion
raises after `timeout_ms`) and depth bound (deep recursion raises before Python's stack
does); its result must serialize to at most `value_bytes`. An expression is parsed again
for each evaluation: the time box starts when it is compiled, and a compiled expression
keeps evaluation state of its own, so one object cannot serve two threads. Evaluations
asked for in the same turn of the event loop (a job's batch of map items) go to the pool as
one task, evaluated one after the other, each under its own bounds: one hand-off to a
thread and back instead of one per item.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jsonata import JException, Jsonata

from ator.errors import AtorError

__all__ = ["ExpressionError", "Expressions", "parse_error"]


class ExpressionError(AtorError):
    """An expression failed to evaluate, ran too long or produced too large a value."""

    kind = "expression"
    code = "expression_failed"
    status = 422


def parse_error(expr: str) -> str | None:
    """Why `expr` is not JSONata (None when it parses)."""
    try:
        Jsonata(expr)
    except JException as exc:
        return f"not a JSONata expression: {exc}"
    except (RecursionError, ValueError, TypeError) as exc:  # the parser's own failures
        return f"not a JSONata expression: {exc}"
    return None


class Expressions:
    def __init__(self, *, timeout_ms: int, depth: int, value_bytes: int, threads: int = 4):
        self.timeout_ms = timeout_ms
        self.depth = depth
        self.value_bytes = value_bytes
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ator-jsonata")
        self._asked: list[tuple[str, Any, asyncio.Future[Any]]] = []

    async def evaluate(self, expr: str, data: Any) -> Any:
        """The value of `expr` over `data` (JSON values in, a JSON value out).
        Raises ExpressionError (with the reason) for any failure."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._asked.append((expr, data, future))
        if len(self._asked) == 1:
            loop.call_soon(self._hand_off, loop)
        return await future

    def _hand_off(self, loop: asyncio.AbstractEventLoop) -> None:
        asked, self._asked = self._asked, []
        try:
            self._pool.submit(self._evaluate_all, loop, asked)
        except RuntimeError as exc:  # the pool is shut down (closing)
            for _, _, future in asked:
                if not future.done():
                    future.set_exception(exc)

    def _evaluate_all(self, loop: asyncio.AbstractEventLoop,
                      asked: list[tuple[str, Any, asyncio.Future[Any]]]) -> None:
        done: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        for expr, data, future in asked:
            try:
                done.append((future, self._evaluate(expr, data), None))
            except Exception as exc:  # the asker's to handle: handed back to it
                done.append((future, None, exc))
        loop.call_soon_threadsafe(_settle, done)

    def _evaluate(self, expr: str, data: Any) -> Any:
        try:
            compiled = Jsonata(expr)
            frame = compiled.create_frame()
            frame.set_runtime_bounds(self.timeout_ms, self.depth)
            value = compiled.evaluate(data, frame)
        except JException as exc:
            raise ExpressionError(f"expression failed: {exc}") from None
        except (RecursionError, ValueError, TypeError, ArithmeticError) as exc:
            raise ExpressionError(f"expression failed: {type(exc).__name__}: {exc}") from None
        size = len(encode(value))
        if size > self.value_bytes:
            raise ExpressionError(
                f"the expression's value is {size} bytes, above the cap of {self.value_bytes}",
                code="value_too_large")
        return value

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _settle(done: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, value, exc in done:
        if future.done():  # the asker was cancelled meanwhile
            continue
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)


def encode(value: Any) -> bytes:
    """A value as stored (compact JSON)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise ExpressionError(f"the value is not JSON: {exc}") from None
