"""Built-in native tools (layer: tools; imports ator.tools.base).

Small, safe, and useful for demos: arithmetic without `eval`, and the current time.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ator.errors import ToolError
from ator.tools.base import Tool, ToolContext

__all__ = ["builtin_tools", "calculator", "current_time"]

_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos,
}


def _eval(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 1000:
            raise ToolError("exponent too large")
        return _OPS[type(node.op)](left, right)  # type: ignore[no-any-return]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))  # type: ignore[no-any-return]
    raise ToolError(f"unsupported expression element: {type(node).__name__}")


async def _calculate(args: dict[str, Any], ctx: ToolContext) -> str:
    expression = args["expression"]
    try:
        tree = ast.parse(expression, mode="eval")
        return str(_eval(tree))
    except (SyntaxError, ZeroDivisionError, OverflowError) as exc:
        raise ToolError(f"cannot evaluate {expression!r}: {exc}") from exc


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
