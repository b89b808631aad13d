"""What a tool is (layer: tools; imports providers.base for ToolSpec).

A tool is a name, a description, a JSON schema for its input and an async handler. Handlers
return text (or anything JSON-serializable, which is rendered as JSON); raising `ToolError`
(or any exception) becomes an `is_error` result the model can read, never a crashed turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ator.providers.base import ToolSpec

__all__ = ["Tool", "ToolCall", "ToolContext", "ToolOutcome"]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a handler may know about where it runs."""

    org_id: UUID
    thread_id: UUID
    turn_id: UUID
    tool_use_id: str


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    timeout: float | None = None  # None: the setup's per-tool timeout
    read_only: bool = False
    origin: str = "native"

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema)


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    input: dict[str, Any] | None
    raw: str = ""


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    tool_use_id: str
    name: str
    content: str
    is_error: bool
    duration_ms: int
    truncated_from: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def block(self) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "content": self.content,
            "is_error": self.is_error,
        }
