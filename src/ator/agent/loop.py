"""The agent loop: model call → tools → model call … until a stop (layer: agent; imports
providers, tools, cost, errors).

The loop owns no storage. It reports each completed piece to a `StepSink` (the engine, which
persists it before anything else happens) and returns a typed outcome. Per model call:

- `end_turn` / `stop_sequence` → finish;
- `tool_use` → validate and run all tools concurrently, persist all results as one message,
  check caps, continue;
- `pause_turn` → call again with the partial answer;
- `max_tokens` / `refusal` → finish with that reason;
- transient provider errors are retried with jitter, honouring `retry-after`; a provider
  silent for `stall_timeout` ends the turn as `stalled`.

Caps checked before every model call: steps, tokens, org budget. Wall time is the engine's
(it wraps the whole turn).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from ator.agent.caps import Caps
from ator.cost.prices import Priced, PriceTable
from ator.errors import ProviderError
from ator.providers.base import (
    Block,
    Message,
    MessageStop,
    ModelRequest,
    Provider,
    StreamEvent,
    SystemBlock,
    TextDelta,
    ThinkingDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
)
from ator.tools.base import ToolCall, ToolContext, ToolOutcome
from ator.tools.registry import ToolRegistry

__all__ = ["Budget", "LoopOutcome", "ModelReply", "StepSink", "run_loop"]


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One completed model call."""

    message: Message
    stop_reason: str
    usage: Usage
    priced: Priced
    duration_ms: int
    invalid_inputs: dict[str, str]  # tool_use id -> raw text that was not valid JSON


class StepSink(Protocol):
    """Where the loop reports progress. Each method returns only once the data is durable."""

    async def on_reply(self, step: int, reply: ModelReply, final: str | None) -> None:
        """A model call completed. `final` is the turn's stop reason when this reply ends it
        (then it is durable on return); otherwise the sink may hold it until `flush` or the
        tool results."""
        ...

    async def on_tool_results(self, step: int, results: list[ToolOutcome]) -> None: ...

    async def flush(self) -> None:
        """Make everything reported so far durable now (a sink may batch a reply with the
        tool results that follow it)."""
        ...

    def on_delta(self, event: StreamEvent) -> None:
        """Ephemeral: streamed text and tool-call progress, before it is persisted."""
        ...


@dataclass
class Budget:
    """The org's monthly budget as the loop sees it; the sink updates `spent` after writes."""

    limit: Decimal | None
    spent: Decimal
    fail_closed: bool = True

    def blocks(self, model_priced: bool) -> str | None:
        if self.limit is None:
            return None
        if self.spent >= self.limit:
            return f"the org's monthly budget of ${self.limit} is spent (${self.spent})"
        if not model_priced and self.fail_closed:
            return "the model has no price, so spend against the budget cannot be measured"
        return None


@dataclass(frozen=True, slots=True)
class LoopOutcome:
    stop_reason: str
    steps: int
    usage: Usage
    cost: Decimal
    error: str | None = None


async def run_loop(
    *,
    provider: Provider,
    model: str,
    system: list[SystemBlock],
    messages: list[Message],
    tools: ToolRegistry,
    caps: Caps,
    prices: PriceTable,
    budget: Budget,
    sink: StepSink,
    ctx_for: Callable[[ToolCall], ToolContext],
    user_id: str | None = None,
    cache: bool = True,
    step_offset: int = 0,
) -> LoopOutcome:
    """Run steps until a stop. `messages` is extended in place with what the turn adds."""
    usage = Usage()
    cost = Decimal(0)
    step = step_offset
    specs = tools.specs(description_limit=caps.tool_description_chars)
    model_priced = prices.lookup(model) is not None
    while True:
        if step - step_offset >= caps.max_steps:
            return LoopOutcome("max_steps", step, usage, cost)
        blocked = budget.blocks(model_priced)
        if blocked is not None:
            return LoopOutcome("budget", step, usage, cost, blocked)
        request = ModelRequest(
            model=model, messages=list(messages), system=system, tools=specs,
            max_tokens=caps.max_output_tokens, user_id=user_id, cache=cache,
        )
        try:
            reply = await _call_with_retries(provider, request, caps, prices, sink)
        except TimeoutError:
            return LoopOutcome("stalled", step, usage, cost,
                               f"no provider event for {caps.stall_timeout:g}s")
        except ProviderError as exc:
            return LoopOutcome(f"error:{exc.kind}", step, usage, cost, exc.message)
        step += 1
        usage = usage + reply.usage
        cost += reply.priced.usd
        messages.append(reply.message)
        calls = [
            ToolCall(b["id"], b["name"], None if b["id"] in reply.invalid_inputs else b["input"],
                     reply.invalid_inputs.get(b["id"], ""))
            for b in reply.message["content"] if b["type"] == "tool_use"
        ]
        final = _final_reason(reply.stop_reason, bool(calls))
        if final is None and usage.total_tokens >= caps.max_turn_tokens:
            final = "token_cap"
        # Tool calls we will not run are closed by history rebuilding (synthetic error results).
        await sink.on_reply(step, reply, final)
        if final is not None:
            return LoopOutcome(final, step, usage, cost)
        if not calls:  # pause_turn: nothing to run, persist before calling again
            await sink.flush()
            continue
        running = asyncio.ensure_future(tools.run_all(
            calls, ctx_for, default_timeout=caps.tool_timeout,
            result_limit=caps.tool_result_chars,
        ))
        try:
            # Fast tools: the reply and its results become one write. Slow tools: the reply
            # (and its cost) is persisted while they run.
            done, _ = await asyncio.wait({running}, timeout=caps.persist_calls_after)
            if not done:
                await sink.flush()
            results = await running
        finally:
            running.cancel()
        await sink.on_tool_results(step, results)
        messages.append({"role": "user", "content": [r.block() for r in results]})


def _final_reason(stop_reason: str, has_calls: bool) -> str | None:
    if stop_reason == "tool_use" and has_calls:
        return None
    if stop_reason == "pause_turn":
        return None
    if stop_reason in ("end_turn", "stop_sequence", "tool_use"):
        return "end_turn"
    return stop_reason  # max_tokens, refusal


async def _call_with_retries(
    provider: Provider, request: ModelRequest, caps: Caps, prices: PriceTable, sink: StepSink
) -> ModelReply:
    attempt = 0
    while True:
        try:
            return await _call_once(provider, request, caps, prices, sink)
        except ProviderError as exc:
            if not exc.retryable or attempt >= caps.provider_retries:
                raise
            attempt += 1
            backoff = min(30.0, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
            await asyncio.sleep(max(exc.retry_after or 0.0, backoff))


async def _call_once(
    provider: Provider, request: ModelRequest, caps: Caps, prices: PriceTable, sink: StepSink
) -> ModelReply:
    started = time.perf_counter()
    blocks: list[Block] = []
    tool_blocks: dict[str, Block] = {}
    invalid: dict[str, str] = {}
    stop: MessageStop | None = None
    loop = asyncio.get_running_loop()
    stream = provider.stream(request)
    try:
        async with asyncio.timeout(caps.stall_timeout) as watchdog:
            async for event in stream:
                watchdog.reschedule(loop.time() + caps.stall_timeout)
                sink.on_delta(event)
                _assemble(event, blocks, tool_blocks, invalid)
                if isinstance(event, MessageStop):
                    stop = event
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    if stop is None:
        raise ProviderError("the stream ended without a stop event", kind="protocol",
                            retryable=True)
    model = stop.model or request.model
    return ModelReply(
        message={"role": "assistant", "content": blocks},
        stop_reason=stop.stop_reason,
        usage=stop.usage,
        priced=prices.cost(request.model if prices.lookup(request.model) else model, stop.usage),
        duration_ms=int((time.perf_counter() - started) * 1000),
        invalid_inputs=invalid,
    )


def _assemble(
    event: StreamEvent, blocks: list[Block], tool_blocks: dict[str, Block], invalid: dict[str, str]
) -> None:
    if isinstance(event, TextDelta):
        if blocks and blocks[-1]["type"] == "text":
            blocks[-1]["text"] += event.text
        else:
            blocks.append({"type": "text", "text": event.text})
    elif isinstance(event, ThinkingDelta):
        if not (blocks and blocks[-1]["type"] == "thinking"):
            blocks.append({"type": "thinking", "thinking": "", "signature": None})
        blocks[-1]["thinking"] += event.text
        if event.signature is not None:
            blocks[-1]["signature"] = event.signature
    elif isinstance(event, ToolUseStart):
        block: dict[str, Any] = {"type": "tool_use", "id": event.id, "name": event.name,
                                 "input": {}}
        tool_blocks[event.id] = block
        blocks.append(block)
    elif isinstance(event, ToolUseStop):
        target = tool_blocks.get(event.id)
        if target is not None:
            if event.input is None:
                invalid[event.id] = event.raw
            else:
                target["input"] = event.input
