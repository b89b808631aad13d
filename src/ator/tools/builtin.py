"""Built-in native tools (layer: tools; imports ator.tools.base, errors).

Small, safe, and useful for demos: arithmetic without `eval`, and the current time.

The calculator is the one piece of CPU-bound tool code, and the model chooses its input: it
bounds the work before doing it (the size of every product and power is estimated from its
operands, and a result over MAX_DIGITS digits is refused unevaluated) and evaluates a long
expression in a worker thread under a timeout, so neither `((9**999)**999)**9` nor anything like
it stalls the loop. A short one (INLINE_CHARS or fewer) is evaluated on the loop: it holds too
few operations to take long (the worst found, a few full-size powers and the text of a
4,000-digit result, is about 0.3 ms), while the thread hop costs 0.12 ms for every call.
"""

from __future__ import annotations

import ast
import asyncio
import math
import operator
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from ator.errors import ToolError
from ator.tools.base import Tool, ToolContext

__all__ = ["INLINE_CHARS", "MAX_DIGITS", "MAX_EXPRESSION_CHARS", "builtin_tools", "calculator",
           "current_time"]

#: The largest integer result the calculator computes. Below the interpreter's default limit on
#: int-to-text conversion (4300 digits), so every result it computes can be shown.
MAX_DIGITS: Final = 4000
#: Longer input is refused before parsing (a deep or long expression costs time to parse too).
MAX_EXPRESSION_CHARS: Final = 1000
#: Expressions this short are evaluated on the event loop; longer ones in a worker thread.
INLINE_CHARS: Final = 48
#: Wall-clock bound on one evaluation, in its worker thread.
_TIMEOUT: Final = 2.0

_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos,
}


def _check_size(op: ast.operator, left: float | int, right: float | int) -> None:
    """Refuse an int product or power whose result would exceed MAX_DIGITS, before computing
    it. Float arithmetic is bounded by itself (it overflows to an OverflowError)."""
    if not (isinstance(left, int) and isinstance(right, int)) or left == 0 or right == 0:
        return
    if isinstance(op, ast.Mult):
        # math.log10 takes ints of any size; a product has floor(log a + log b) + 1 digits.
        estimate = math.log10(abs(left)) + math.log10(abs(right)) + 1
    elif isinstance(op, ast.Pow):
        if right < 0 or abs(left) == 1:
            return  # a float, or +-1
        estimate = right * math.log10(abs(left)) + 1
    else:
        return  # +, -, /, //, %: no bigger than their operands
    if estimate > MAX_DIGITS:
        raise ToolError(f"result too large: about {estimate:.3g} digits (limit {MAX_DIGITS})")


def _eval(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        _check_size(node.op, left, right)
        return _OPS[type(node.op)](left, right)  # type: ignore[no-any-return]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))  # type: ignore[no-any-return]
    raise ToolError(f"unsupported expression element: {type(node).__name__}")


def evaluate(expression: str) -> str:
    """The value of an arithmetic expression, as text. Raises ToolError for anything else,
    and for results over MAX_DIGITS digits (refused before they are computed). CPU-bound:
    call it off the event loop."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression, mode="eval")
        return str(_eval(tree))
    except (SyntaxError, ZeroDivisionError, OverflowError, RecursionError, ValueError) as exc:
        raise ToolError(f"cannot evaluate {expression!r}: {exc}") from exc


async def _calculate(args: dict[str, Any], ctx: ToolContext) -> str:
    expression = args["expression"]
    if not isinstance(expression, str):
        raise ToolError("expression must be a string")
    if len(expression) <= INLINE_CHARS:
        return evaluate(expression)
    try:
        # A thread cannot be killed: the bounds above are what keep its work short; the
        # timeout keeps the turn from waiting on anything they missed.
        return await asyncio.wait_for(asyncio.to_thread(evaluate, expression), _TIMEOUT)
    except TimeoutError as exc:
        raise ToolError(f"evaluation took longer than {_TIMEOUT:g}s") from exc


async def _now(args: dict[str, Any], ctx: ToolContext) -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


calculator = Tool(
    name="calculator",
    description="Evaluate an arithmetic expression (+ - * / // % ** and parentheses).",
    input_schema={
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "e.g. (2+3)*4"}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    handler=_calculate,
    read_only=True,
)

current_time = Tool(
    name="current_time",
    description="The current date and time in UTC, ISO 8601.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    handler=_now,
    read_only=True,
)


def builtin_tools() -> list[Tool]:
    return [calculator, current_time]
