"""The `claude -p --output-format stream-json --verbose --include-partial-messages` stream
as provider events (layer: providers; imports providers.base, errors).

One JSON object per line, by `type`:

- `system` (`init`: the session id and the model; `api_retry`, task and hook events):
  signs of life;
- `stream_event` (a raw Messages API event): text and thinking deltas of the main agent
  stream as they come (a subagent's, with `parent_tool_use_id`, are only signs of life);
  `message_start` / `message_delta` update that message's usage;
- `assistant`: complete content blocks. Text and thinking already streamed as deltas are
  not repeated; `tool_use` / `server_tool_use` are tools the CLI runs itself
  (`NativeToolCall`, never run by ator); its `usage` is the usage of that API call (one
  call may come as several `assistant` lines with one message id: counted once);
- `user`: `tool_result` blocks, the results of those tools (`NativeToolResult`);
- `result`: the end. `success` without `is_error` ends the call (`end_turn`) at the CLI's
  own `total_cost_usd`, with its `session_id` kept to `--resume`; `error_max_turns` and
  `error_max_budget_usd` (ator's backstops) end it `max_steps` / `budget`; anything else,
  `success` with `is_error: true` included (a failed API call reported that way), and an
  empty `result` text, is a typed error, billed at what the CLI reported.
"""

from __future__ import annotations

import json
from typing import Any

from ator.cost.price import usd_amount
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
    UsageUpdate,
)

__all__ = ["ClaudeStream"]

_STOPS = {"error_max_turns": "max_steps", "error_max_budget_usd": "budget"}
_TEXT_LIMIT = 500


class ClaudeStream:
    """Folds claude's lines into events; `end()` gives the closing ones."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.model: str | None = None
        self._usage: dict[str, Usage] = {}  # by API message id
        self._current: str | None = None  # the message id streaming now
        self._streamed: set[str] = set()  # message ids whose text came as deltas
        self._result: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """The `result` line was read: nothing after it counts."""
        return self._result is not None

    def feed(self, obj: dict[str, Any]) -> list[StreamEvent]:
        kind = obj.get("type")
        if kind == "system":
            if obj.get("subtype") == "init":
                self.session_id = _str(obj.get("session_id")) or self.session_id
                self.model = _str(obj.get("model")) or self.model
            return [KEEPALIVE]
        if kind == "stream_event":
            return self._partial(obj)
        if kind == "assistant":
            return self._assistant(obj)
        if kind == "user":
            return self._tool_results(obj)
        if kind == "result":
            self._result = obj
            self.session_id = _str(obj.get("session_id")) or self.session_id
            return []
        return [KEEPALIVE]  # a type this version does not know: alive, nothing to show

    def _partial(self, obj: dict[str, Any]) -> list[StreamEvent]:
        event = obj.get("event")
        if not isinstance(event, dict) or obj.get("parent_tool_use_id"):
            return [KEEPALIVE]
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self._current = _str(message.get("id"))
            return self._noted(self._current, message.get("usage"))
        if kind == "message_delta":
            return self._noted(self._current, event.get("usage"), merge=True)
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                self._mark_streamed()
                return [TextDelta(str(delta["text"]))]
            if delta.get("type") == "thinking_delta" and delta.get("thinking"):
                self._mark_streamed()
                return [ThinkingDelta(str(delta["thinking"]))]
        return [KEEPALIVE]

    def _mark_streamed(self) -> None:
        if self._current is not None:
            self._streamed.add(self._current)

    def _assistant(self, obj: dict[str, Any]) -> list[StreamEvent]:
        message = obj.get("message") or {}
        message_id = _str(message.get("id"))
        sub = bool(obj.get("parent_tool_use_id"))
        out: list[StreamEvent] = []
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype in ("tool_use", "server_tool_use"):
                args = block.get("input")
                out.append(NativeToolCall(str(block.get("id", "")), str(block.get("name", "")),
                                          args if isinstance(args, dict) else {}))
            elif sub or message_id in self._streamed:
                continue  # shown already as deltas, or a subagent's own words
            elif btype == "text" and block.get("text"):
                out.append(TextDelta(str(block["text"])))
            elif btype == "thinking" and block.get("thinking"):
                out.append(ThinkingDelta(str(block["thinking"]), _str(block.get("signature"))))
        out.extend(self._noted(message_id, message.get("usage")))
        return out or [KEEPALIVE]

    def _tool_results(self, obj: dict[str, Any]) -> list[StreamEvent]:
        message = obj.get("message")
        content = message.get("content") if isinstance(message, dict) else obj.get("content")
        out: list[StreamEvent] = []
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                out.append(NativeToolResult(str(block.get("tool_use_id", "")),
                                            _text(block.get("content")),
                                            bool(block.get("is_error"))))
        return out or [KEEPALIVE]

    def _noted(self, message_id: str | None, raw: Any, *, merge: bool = False
               ) -> list[StreamEvent]:
        if message_id is None or not isinstance(raw, dict):
            return [KEEPALIVE]
        usage = _usage(raw)
        before = self._usage.get(message_id)
        if merge and before is not None:  # message_delta carries output; keep the input
            usage = Usage(before.input_tokens or usage.input_tokens, usage.output_tokens,
                          before.cache_read_tokens or usage.cache_read_tokens,
                          before.cache_write_tokens or usage.cache_write_tokens)
        self._usage[message_id] = usage
        return [UsageUpdate(self._so_far(), model=self.model)]

    def _so_far(self) -> Usage:
        total = Usage()
        for usage in self._usage.values():
            total = total + usage
        return total

    def end(self) -> tuple[list[StreamEvent], ProviderError | None]:
        """The closing events, and the error the call ends with (None: it finished)."""
        result = self._result
        if result is None:
            return [], ProviderError("the CLI ended without a result", kind="cli_no_result")
        usage = _usage(result["usage"]) if isinstance(result.get("usage"), dict) \
            else self._so_far() if self._usage else Usage(reported=False)
        cost = usd_amount(result.get("total_cost_usd"))
        model = _main_model(result.get("modelUsage")) or self.model
        subtype = str(result.get("subtype", ""))
        session = {"session_id": self.session_id} if self.session_id else None
        if subtype in _STOPS:
            return [MessageStop(_STOPS[subtype], usage, model, cost, session)], None
        text = result.get("result")
        problem: str | None = None
        if subtype != "success":
            problem = f"the CLI ended with {subtype or 'no subtype'}"
        elif result.get("is_error"):
            problem = "the CLI reported an error"
        elif not isinstance(text, str) or not text.strip():
            problem = "the CLI's result is empty"
        if problem is None:
            return [MessageStop("end_turn", usage, model, cost, session)], None
        detail = f": {str(text)[:_TEXT_LIMIT]}" if isinstance(text, str) and text else ""
        kind = "cli_empty_result" if subtype == "success" and not result.get("is_error") \
            else "cli_error"
        return ([UsageUpdate(usage, cost_usd=cost, model=model)],
                ProviderError(problem + detail, kind=kind))


def _usage(raw: dict[str, Any]) -> Usage:
    return Usage(input_tokens=_int(raw.get("input_tokens")),
                 output_tokens=_int(raw.get("output_tokens")),
                 cache_read_tokens=_int(raw.get("cache_read_input_tokens")),
                 cache_write_tokens=_int(raw.get("cache_creation_input_tokens")))


def _main_model(raw: Any) -> str | None:
    """The model that did most of the work, by `modelUsage` (subagents may use another)."""
    if not isinstance(raw, dict) or not raw:
        return None
    def weight(item: tuple[str, Any]) -> int:
        figures = item[1] if isinstance(item[1], dict) else {}
        return _int(figures.get("outputTokens")) + _int(figures.get("inputTokens"))
    return str(max(raw.items(), key=weight)[0])


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b)
                         for b in content)
    return "" if content is None else json.dumps(content)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None

