"""JSONata expressions, bounded and off the event loop (layer: workflows; imports jsonata,
ator.errors).

Recipes compute with JSONata (`jsonata-python`, a pure-Python port of the reference
implementation), never with `eval`. Every evaluation runs on a small thread pool, so a slow
expression never blocks the loop, under JSONata's own time box (a runaway loop or recursion
raises after `timeout_ms`) and depth bound (deep recursion raises before Python's stack
does); its result must serialize to at most `value_bytes`. An expression is parsed again
for each evaluation: the time box starts when it is compiled, and a compiled expression
keeps evaluation state of its own, so one object cannot serve two threads.
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

    async def evaluate(self, expr: str, data: Any) -> Any:
        """The value of `expr` over `data` (JSON values in, a JSON value out).
        Raises ExpressionError (with the reason) for any failure."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._evaluate, expr, data)

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


def encode(value: Any) -> bytes:
    """A value as stored (compact JSON)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise ExpressionError(f"the value is not JSON: {exc}") from None
