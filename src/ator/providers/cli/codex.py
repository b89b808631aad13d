"""The `codex exec --json` stream as provider events (layer: providers; imports
providers.base, errors).

One JSON object per line, by `type`:

- `thread.started {thread_id}`: the session, kept to `resume` on the thread's next turn;
- `turn.started`: a sign of life;
- `item.started | item.updated | item.completed {item {id, type, ...}}`: `agent_message`
  text and `reasoning` stream as deltas (what an update adds to the text already shown);
  `command_execution`, `file_change`, `mcp_tool_call` and `web_search` are tools codex runs
  itself: a `NativeToolCall` when the item starts (or first appears), its
  `NativeToolResult` when it completes; `todo_list` is a sign of life;
- `turn.completed {usage}`: the end. Users report the figure is cumulative over the codex
  session, not per call: the call's usage is the difference from the cumulative figure
  stored with the session after the previous turn (`previous`), and the new cumulative
  figure is stored in turn. Codex reports no cost: the call is priced from the catalog by
  the loop (`cost_source: "catalog"`, computed by ator);
- `turn.failed {error}`: a typed error; `error {message}` is remembered and becomes the
  error if no `turn.completed` follows (codex also reports transient reconnects this way).
  Nothing is reported on an interrupt: such a call is billed at the meter's estimate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ator.errors import ProviderError
from ator.providers.base import (
    KEEPALIVE,
    MessageStop,
    NativeToolCall,
    NativeToolResult,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    Usage,
)

__all__ = ["CodexStream"]

_TOOLS = ("command_execution", "file_change", "mcp_tool_call", "web_search")
_TEXT_LIMIT = 500


class CodexStream:
    def __init__(self, previous: Mapping[str, Any] | None = None) -> None:
        self.thread_id: str | None = None
        prior = (previous or {}).get("cumulative")
        self._before = _usage(prior) if isinstance(prior, dict) else Usage()
        self._shown: dict[str, int] = {}  # item id -> characters of its text already sent
        self._called: set[str] = set()
        self._done: set[str] = set()
        self._completed: dict[str, Any] | None = None
        self._failed: str | None = None
        self._error: str | None = None

    @property
    def finished(self) -> bool:
        return self._completed is not None or self._failed is not None

    def feed(self, obj: dict[str, Any]) -> list[StreamEvent]:
        kind = obj.get("type")
        if kind == "thread.started":
            found = obj.get("thread_id")
            self.thread_id = found if isinstance(found, str) and found else self.thread_id
        elif kind in ("item.started", "item.updated", "item.completed"):
            item = obj.get("item")
            if isinstance(item, dict):
                return self._item(item, completed=kind == "item.completed") or [KEEPALIVE]
        elif kind == "turn.completed":
            usage = obj.get("usage")
            self._completed = usage if isinstance(usage, dict) else {}
        elif kind == "turn.failed":
            error = obj.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            self._failed = str(message or "the turn failed")
        elif kind == "error":
            self._error = str(obj.get("message") or "codex reported an error")
        return [KEEPALIVE]

    def _item(self, item: dict[str, Any], *, completed: bool) -> list[StreamEvent]:
        item_id = str(item.get("id", ""))
        itype = item.get("type")
        if itype in ("agent_message", "reasoning"):
            text = item.get("text")
            if not isinstance(text, str):
                return []
            new = text[self._shown.get(item_id, 0):]
            self._shown[item_id] = len(text)
            if not new:
                return []
            return [TextDelta(new) if itype == "agent_message" else ThinkingDelta(new)]
        if itype not in _TOOLS:
            return []
        out: list[StreamEvent] = []
        if item_id not in self._called:
            self._called.add(item_id)
            out.append(NativeToolCall(item_id, _tool_name(item), _tool_input(item)))
        if completed and item_id not in self._done:
            self._done.add(item_id)
            content, is_error = _tool_result(item)
            out.append(NativeToolResult(item_id, content, is_error))
        return out

    def end(self) -> tuple[list[StreamEvent], ProviderError | None]:
        if self._failed is not None:
            return [], ProviderError(f"codex: {self._failed[:_TEXT_LIMIT]}", kind="cli_error")
        if self._completed is None:
            if self._error is not None:
                return [], ProviderError(f"codex: {self._error[:_TEXT_LIMIT]}",
                                         kind="cli_error")
            return [], ProviderError("codex ended without turn.completed",
                                     kind="cli_no_result")
        cumulative = _usage(self._completed)
        call = _minus(cumulative, self._before)
        session: dict[str, Any] = {"cumulative": _record(cumulative)}
        if self.thread_id is not None:
            session["thread_id"] = self.thread_id
        return [MessageStop("end_turn", call, None, None, session)], None


def _usage(raw: Mapping[str, Any]) -> Usage:
    """Codex counts cached input inside `input_tokens`: ator's input is the uncached rest."""
    total_in = _int(raw.get("input_tokens"))
    cached = min(_int(raw.get("cached_input_tokens")), total_in)
    return Usage(input_tokens=total_in - cached, output_tokens=_int(raw.get("output_tokens")),
                 cache_read_tokens=cached)


def _minus(now: Usage, before: Usage) -> Usage:
    """This call's share of a cumulative figure. A figure below the previous one is a new
    session (or a per-call report after all): taken as it is."""
    fields = ("input_tokens", "output_tokens", "cache_read_tokens")
    if any(getattr(now, f) < getattr(before, f) for f in fields):
        return now
    return Usage(*(getattr(now, f) - getattr(before, f) for f in fields))


def _record(usage: Usage) -> dict[str, int]:
    return {"input_tokens": usage.input_tokens + usage.cache_read_tokens,
            "cached_input_tokens": usage.cache_read_tokens,
            "output_tokens": usage.output_tokens}


def _tool_name(item: Mapping[str, Any]) -> str:
    itype = str(item.get("type"))
    if itype == "command_execution":
        return "shell"
    if itype == "mcp_tool_call":
        return f"{item.get('server', 'mcp')}__{item.get('tool', 'tool')}"
    return itype


def _tool_input(item: Mapping[str, Any]) -> dict[str, Any]:
    itype = item.get("type")
    if itype == "command_execution":
        return {"command": item.get("command", "")}
    if itype == "file_change":
        return {"changes": item.get("changes") or []}
    if itype == "mcp_tool_call":
        args = item.get("arguments")
        return args if isinstance(args, dict) else {"arguments": args}
    return {"query": item.get("query", "")}


def _tool_result(item: Mapping[str, Any]) -> tuple[str, bool]:
    itype = item.get("type")
    failed = item.get("status") == "failed"
    if itype == "command_execution":
        code = item.get("exit_code")
        output = str(item.get("aggregated_output") or "")
        return output, failed or (isinstance(code, int) and code != 0)
    if itype == "file_change":
        changes = item.get("changes") or []
        lines = [f"{c.get('kind', '?')} {c.get('path', '?')}" for c in changes
                 if isinstance(c, dict)]
        return "\n".join(lines), failed
    if itype == "mcp_tool_call":
        error = item.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else error
            return str(message), True
        result = item.get("result")
        return (result if isinstance(result, str) else json.dumps(result)), failed
    return "", failed


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
