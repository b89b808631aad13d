"""A provider that plays a parent and its subagents, for the subagent tests (layer: tests).

A request whose first user text is a spawn contract ("You are a subagent…") is a child's:
`child(task, request)` answers it; any other is the parent's: `parent(request)`. Each
returns a `Reply`; tool-use ids are unique, as a real provider's are.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ator.providers.base import (
    MessageStop,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
)

__all__ = ["Agents", "Reply", "first_text", "results_in", "task_of"]


@dataclass
class Reply:
    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delay: float = 0.0
    hang: bool = False


def first_text(request: ModelRequest) -> str:
    for message in request.messages:
        if message["role"] == "user":
            for block in message["content"]:
                if block.get("type") == "text":
                    return str(block["text"])
    return ""


def task_of(text: str) -> str:
    found = re.search(r"## Task\n(.*?)(\n\n## |\Z)", text, re.S)
    return found.group(1) if found else ""


def results_in(request: ModelRequest) -> list[str]:
    """Every `<subagent_result …>` opening tag the request's messages carry, in order."""
    out: list[str] = []
    for message in request.messages:
        for block in message["content"]:
            if block.get("type") == "text":
                out += re.findall(r"<subagent_result [^>]*>", str(block["text"]))
    return out


class Agents:
    name = "agents"

    def __init__(self, parent: Callable[[ModelRequest], Reply],
                 child: Callable[[str, ModelRequest], Reply]) -> None:
        self.parent = parent
        self.child = child
        self.requests: list[ModelRequest] = []
        self.child_requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        first = first_text(request)
        if first.startswith("You are a subagent"):
            self.child_requests.append(request)
            reply = self.child(task_of(first), request)
        else:
            self.requests.append(request)
            reply = self.parent(request)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.hang:
            yield TextDelta("working…")
            await asyncio.Event().wait()
        if reply.text:
            yield TextDelta(reply.text)
        for name, args in reply.calls:
            tid = f"toolu_{uuid.uuid4().hex[:16]}"
            yield ToolUseStart(tid, name)
            yield ToolInputDelta(tid, "{}")
            yield ToolUseStop(tid, args)
        stop = "tool_use" if reply.calls else "end_turn"
        yield MessageStop(stop, Usage(10, 5), request.model)


def spawned_tool_results(request: ModelRequest) -> int:
    """How many tool results the request carries (the parent's spawns answered)."""
    return sum(1 for m in request.messages for b in m["content"]
               if b.get("type") == "tool_result")
