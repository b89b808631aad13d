"""A deterministic provider for tests and demos (layer: providers; imports providers.base,
errors).

A script is a list of steps. The step played for a request is chosen from the request
itself, the number of assistant messages since the last user *text* message, so the same
script gives the same answers on any replica and after any restart: step 0 is a turn's first
model call, step 1 its second, and so on. Past the end, the last step repeats when
`repeat_last` is set (a runaway model), else the model says it is done.

A setup can carry a script as JSON (`config.script`, a list of step dicts with the fields of
`ScriptStep`), which is how scripted setups are made over the HTTP API.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ator.errors import ConfigError, ProviderError
from ator.providers.base import (
    KEEPALIVE,
    Message,
    MessageStop,
    ModelRequest,
    NativeToolCall,
    NativeToolResult,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
    UsageUpdate,
)

__all__ = ["ScriptStep", "ScriptedProvider", "tool_then_answer"]


@dataclass(frozen=True, slots=True)
class ScriptStep:
    text: str = ""
    thinking: str = ""
    tool_calls: Sequence[tuple[str, dict[str, Any]]] = ()
    # Raw argument text for a tool call whose JSON is broken (name, raw).
    raw_tool_calls: Sequence[tuple[str, str]] = ()
    stop_reason: str | None = None  # default: tool_use when there are calls, else end_turn
    usage: Usage = field(default_factory=lambda: Usage(input_tokens=10, output_tokens=5))
    delay: float = 0.0  # seconds before the first event
    hang: bool = False  # emit the first event, then nothing, forever
    # Stream the step's text, then hang (a reply cut short by a stop or a timeout).
    hang_after_text: bool = False
    # While hanging, send a Keepalive this often (seconds): alive, so no stall, never done.
    keepalive_every: float = 0.0
    error: ProviderError | None = None
    # Echo the last user text back (handy for demos and for checking context).
    echo: bool = False
    # Tools the "provider" ran itself: (name, input, result), streamed before the text.
    native_tool_calls: Sequence[tuple[str, dict[str, Any], str]] = ()
    # The cost the "provider" reports for the call (None: priced from the catalog).
    cost_usd: Decimal | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptStep:
        try:
            usage = data.get("usage") or {}
            err = data.get("error")
            return cls(
                text=str(data.get("text", "")),
                thinking=str(data.get("thinking", "")),
                tool_calls=[(str(c["name"]), dict(c.get("input", {})))
                            for c in data.get("tool_calls", [])],
                stop_reason=data.get("stop_reason"),
                usage=_usage(usage) if usage else Usage(10, 5),
                delay=float(data.get("delay", 0.0)),
                hang=bool(data.get("hang", False)),
                hang_after_text=bool(data.get("hang_after_text", False)),
                keepalive_every=float(data.get("keepalive_every", 0.0)),
                error=ProviderError(str(err.get("message", "scripted error")),
                                    kind=str(err.get("kind", "server")),
                                    retryable=bool(err.get("retryable", False)))
                if err else None,
                echo=bool(data.get("echo", False)),
                native_tool_calls=[(str(c["name"]), dict(c.get("input", {})),
                                    str(c.get("result", "")))
                                   for c in data.get("native_tool_calls", [])],
                cost_usd=None if data.get("cost_usd") is None else Decimal(str(data["cost_usd"])),
            )
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as exc:
            raise ConfigError(f"invalid script step {data!r}: {exc}") from exc


def _usage(raw: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=int(raw.get("input_tokens", 0)),
        output_tokens=int(raw.get("output_tokens", 0)),
        cache_read_tokens=int(raw.get("cache_read_tokens", 0)),
        cache_write_tokens=int(raw.get("cache_write_tokens", 0)),
        reported=bool(raw.get("reported", True)),
    )


def _turn_position(messages: Sequence[Message]) -> int:
    """Assistant messages since the turn's user message. A message carrying tool results is
    the same turn going on, even when items were injected beside them (subagent results,
    notices: text blocks next to the results)."""
    n = 0
    for msg in reversed(messages):
        if msg["role"] == "assistant":
            n += 1
        elif any(b.get("type") == "text" for b in msg["content"]) and not any(
                b.get("type") == "tool_result" for b in msg["content"]):
            break
    return n


def _last_user_text(messages: Sequence[Message]) -> str:
    for msg in reversed(messages):
        if msg["role"] == "user":
            texts = [b["text"] for b in msg["content"] if b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
    return ""


class ScriptedProvider:
    """Plays a script, or asks `responder(request)` for each step."""

    def __init__(
        self,
        steps: Sequence[ScriptStep] = (),
        *,
        responder: Callable[[ModelRequest], ScriptStep] | None = None,
        repeat_last: bool = False,
        name: str = "scripted",
    ) -> None:
        self.name = name
        self._steps = list(steps)
        self._responder = responder
        self._repeat_last = repeat_last
        self.requests: list[ModelRequest] = []
        self.record_requests = False

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ScriptedProvider:
        script = config.get("script", [{"echo": True}])
        if not isinstance(script, list):
            raise ConfigError("config.script must be a list of steps")
        return cls(
            [ScriptStep.from_dict(s) for s in script],
            repeat_last=bool(config.get("repeat_last", False)),
        )

    def _step_for(self, request: ModelRequest) -> ScriptStep:
        if self._responder is not None:
            return self._responder(request)
        pos = _turn_position(request.messages)
        if pos < len(self._steps):
            return self._steps[pos]
        if self._repeat_last and self._steps:
            return self._steps[-1]
        return ScriptStep(text="Done.")

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self.record_requests:
            self.requests.append(request)
        step = self._step_for(request)
        if step.delay:
            await asyncio.sleep(step.delay)
        if step.error is not None:
            raise step.error
        if step.usage.reported:
            # As Anthropic's message_start: the prompt is counted before anything is generated.
            u = step.usage
            yield UsageUpdate(Usage(u.input_tokens, 0, u.cache_read_tokens, u.cache_write_tokens))
        if step.thinking:
            yield ThinkingDelta(step.thinking, signature="scripted")
        if step.hang:
            async for event in _hang(step.keepalive_every):
                yield event
        for k, (name, args, result) in enumerate(step.native_tool_calls):
            nid = f"srvtoolu_s{_turn_position(request.messages)}_{k}"
            yield NativeToolCall(nid, name, args)
            yield NativeToolResult(nid, result)
        text = step.text
        if step.echo:
            text = (text + " " if text else "") + f"You said: {_last_user_text(request.messages)}"
        if text:
            yield TextDelta(text)
        if step.hang_after_text:
            async for event in _hang(step.keepalive_every):
                yield event
        base = _turn_position(request.messages)
        for i, (name, args) in enumerate(step.tool_calls):
            # Unique like a real provider's: a tool keyed on the id (a spawn's idempotency)
            # must not take a later turn's call for an earlier one.
            tid = f"toolu_s{base}_{i}_{uuid.uuid4().hex[:8]}"
            raw = json.dumps(args)
            yield ToolUseStart(tid, name)
            yield ToolInputDelta(tid, raw)
            yield ToolUseStop(tid, args, raw)
        for j, (name, raw) in enumerate(step.raw_tool_calls):
            tid = f"toolu_s{base}_r{j}_{uuid.uuid4().hex[:8]}"
            yield ToolUseStart(tid, name)
            yield ToolInputDelta(tid, raw)
            yield ToolUseStop(tid, None, raw)
        has_calls = bool(step.tool_calls or step.raw_tool_calls)
        stop = step.stop_reason or ("tool_use" if has_calls else "end_turn")
        yield MessageStop(stop, step.usage, request.model, cost_usd=step.cost_usd)


async def _hang(keepalive_every: float) -> AsyncIterator[StreamEvent]:
    """A provider that stops making progress; only a cap or a stop ends this."""
    if keepalive_every <= 0:
        await asyncio.Event().wait()
    while True:
        await asyncio.sleep(keepalive_every)  # the pace of a provider's pings
        yield KEEPALIVE


def tool_then_answer(tool: str, args: dict[str, Any], answer: str = "Done.") -> ScriptedProvider:
    """The benchmark's turn: one tool call, then a final answer."""
    return ScriptedProvider([ScriptStep(tool_calls=[(tool, args)]), ScriptStep(text=answer)])
