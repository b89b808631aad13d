"""The agent loop: model call → tools → model call … until a stop (layer: agent; imports
agent.*, providers, tools, cost, errors).

The loop owns no storage. It reports each completed piece to a `StepSink` (the engine, which
persists it) and returns a typed `Outcome`. A step's reply and tool results may be held by the
sink while what follows runs (its tools, the next model call): the loop flushes them once
that runs past `persist_calls_after`, so a turn of fast parts is few writes and a slow part
never waits on one. Per model call:

- before it: the step's tools are asked of the turn's toolsets, the system prompt is built
  from the turn's layers and the tools actually mounted, and every hook's `before_call` may
  change the request or end the turn (`StopTurn`: budget, caps); what is then sent is
  described for the inspector (`state.request_meta`, persisted with the call);
- `end_turn` / `stop_sequence` → finish;
- `tool_use` → validate and run all tools concurrently, persist all results as one message,
  then inject what the hooks' `between_steps` return (persisted first), check caps, continue
  (calls a hook's `hold` keeps from running end the turn instead, `held`: the reply, the
  other calls' results and the holds are persisted with the end, in one write)
  (a tool the provider ran itself arrives as a `native_tool_*` block of the reply: kept and
  persisted, never run here);
- `pause_turn` → call again with the partial answer;
- `max_tokens` / `refusal` → finish with that reason;
- transient provider errors are retried with jitter, honouring `retry-after`; a provider
  silent for `stall_timeout` ends the turn as `stalled`;
- a context overflow (the provider refused the request as too long) asks the hooks'
  `on_overflow` to make the next request smaller (compaction); if one will, the request is
  built again and retried once, else (or on a second overflow) the turn ends with
  `error:context_overflow` saying what was tried.

Before any side effect of a step (its model call, with the hooks that reserve for it or
compact with a call of their own, and its tools) the loop awaits the turn's `fence`
(agent.fence): a turn another replica has taken over raises there and does nothing more.

While a call streams, `state.partial` holds what it produced and what the provider reported
it consumed, so a turn cut short (stop, timeout, stall) can persist and bill it. Wall time is
the engine's (it wraps the whole turn).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ator.agent.fence import Fence, unfenced
from ator.agent.history import injected_blocks
from ator.agent.hooks import HELD, Hold, Injection, LoopHook, StopTurn
from ator.agent.inspection import describe
from ator.agent.state import PartialCall, TurnContext, TurnState
from ator.agent.system_prompt import build_system, prompt_layers
from ator.cost.prices import Priced, PriceTable
from ator.errors import ProviderError
from ator.obs import tracing
from ator.providers.base import (
    Block,
    Keepalive,
    Message,
    MessageStop,
    ModelRequest,
    NativeToolCall,
    NativeToolResult,
    Provider,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
    UsageMeter,
    UsageUpdate,
)
from ator.tools.base import ToolCall, ToolContext, ToolOutcome
from ator.tools.toolset import TurnTools

__all__ = ["ModelReply", "Outcome", "StepSink", "call_model", "run_loop"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One completed model call."""

    message: Message
    stop_reason: str
    usage: Usage
    priced: Priced
    duration_ms: int
    invalid_inputs: dict[str, str]  # tool_use id -> raw text that was not valid JSON
    ttft_ms: int | None = None  # time to the first streamed content (None: nothing streamed)
    session: Mapping[str, Any] | None = None  # the provider's state to keep for the thread


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the loop ended; the figures are in the turn's state."""

    stop_reason: str
    error: str | None = None


class StepSink(Protocol):
    """Where the loop reports progress. A reply that asks for tools and a step's tool
    results may be held (written with the sink's next write); every other method returns
    once what it was given, and everything held before it, is durable. The loop calls
    `flush` once what it waits on is slow (the tools, the next model call) and before hooks
    that read the turn's spend run."""

    async def on_reply(self, step: int, reply: ModelReply, final: str | None) -> None:
        """A model call completed. `final` is the turn's stop reason when this reply ends it
        (then it is durable on return); otherwise the sink may hold it."""
        ...

    async def on_tool_results(self, step: int, results: list[ToolOutcome]) -> None:
        """The step's tool results; the sink may hold them."""
        ...

    async def on_held(self, step: int, results: list[ToolOutcome],
                      holds: Sequence[Hold]) -> None:
        """Some of the step's calls were held (`LoopHook.hold`): persist the reply, the
        results of the calls that ran, the holds' parts and the turn's end (`held`) in one
        write."""
        ...

    async def on_injected(self, step: int, items: Sequence[Injection]) -> list[dict[str, Any]]:
        """Persist injected items as events; returns their `{"kind", "data"}` records."""
        ...

    async def on_compaction(self, step: int, reply: ModelReply, record: dict[str, Any],
                            meta: dict[str, Any]) -> None:
        """A compaction summary was made by `reply` (a model call of its own): persist the
        call (billed, `purpose='compaction'`, `meta` as its request record) and a
        `compaction` event carrying `record` (the summary and the seq range it replaces),
        in one write."""
        ...

    async def flush(self) -> None:
        """Make everything reported so far durable now (raises what the write failed with)."""
        ...

    @property
    def holding(self) -> bool:
        """Whether something reported is not durable yet (`flush` would write)."""
        ...

    def on_delta(self, event: StreamEvent) -> None:
        """Ephemeral: streamed text and tool-call progress, before it is persisted."""
        ...


async def run_loop(
    turn: TurnContext,
    state: TurnState,
    *,
    provider: Provider,
    tools: TurnTools,
    sink: StepSink,
    prices: PriceTable,
    hooks: Sequence[LoopHook] = (),
    services: Mapping[type, object] | None = None,
    fence: Fence = unfenced,
) -> Outcome:
    """Run steps until a stop. `state.messages` is extended in place with what the turn adds.
    Whatever `fence` raises (the turn was taken elsewhere) ends the loop before it acts."""
    caps = turn.caps
    first_step = state.steps
    services = dict(services or {})
    fixed_layers = prompt_layers(turn)
    injected: list[dict[str, Any]] = []  # notifications added since the previous call
    overflow_retried = False  # one forced compaction and one retry per model call
    while True:
        if state.steps - first_step >= caps.max_steps:
            return Outcome("max_steps")
        await tools.refresh(turn.tool_scope(state.steps + 1))
        system, layers = build_system(fixed_layers, tools.specs)
        request = ModelRequest(
            model=turn.model, messages=list(state.messages), system=system,
            tools=list(tools.specs), max_tokens=caps.max_output_tokens, user_id=turn.user_id,
            cache=turn.cache, session=state.session, org_id=str(turn.org_id),
            thread_tree=str(turn.root_id or turn.thread_id),
        )
        # What the model call will record about its request; hooks may add to it
        # (compaction applied, MCP problems).
        state.request_meta = {"config_hash": turn.config_hash, "notifications": injected}
        injected = []
        await fence()  # before the reservation, compaction and the call itself
        if any(hook.reads_spend(turn) for hook in hooks):
            await sink.flush()  # they read what the last step's write changes
        try:
            for hook in hooks:
                request = await hook.before_call(turn, state, request)
        except StopTurn as stop:
            return Outcome(stop.reason, stop.message)
        # Described after the hooks: what is recorded is what is sent (a hook that rebuilt
        # the system prompt, the single-prompt context manager, leaves its own layers).
        state.request_meta.update(describe(request, state.request_meta.pop("layers", layers)))
        try:
            state.partial = PartialCall(state.steps + 1)
            with tracing.span(f"chat {turn.model}", {
                    "gen_ai.operation.name": "chat", "gen_ai.provider.name": turn.provider,
                    "gen_ai.request.model": turn.model, "ator.step": state.steps + 1,
                    "gen_ai.request.max_tokens": caps.max_output_tokens},
                    kind="client") as span:
                reply = await _call(provider, request, turn, prices, sink, state.partial)
                span.set_attributes({
                    "gen_ai.usage.input_tokens": reply.usage.input_tokens,
                    "gen_ai.usage.output_tokens": reply.usage.output_tokens,
                    "gen_ai.usage.cache_read.input_tokens": reply.usage.cache_read_tokens,
                    "gen_ai.usage.cache_creation.input_tokens": reply.usage.cache_write_tokens,
                    "gen_ai.response.finish_reasons": (reply.stop_reason,),
                    "ator.cost_usd": float(reply.priced.usd),
                    "ator.priced": reply.priced.priced})
        except TimeoutError:
            return Outcome("stalled", f"no provider event for {caps.stall_timeout:g}s")
        except ProviderError as exc:
            if exc.kind != "context_overflow":
                return Outcome(f"error:{exc.kind}", exc.message)
            if overflow_retried:
                return Outcome("error:context_overflow", _after_retry(exc, state))
            if not await _shrink(turn, state, hooks, exc):
                return Outcome("error:context_overflow", exc.message)
            state.partial = None
            overflow_retried = True
            continue
        overflow_retried = False
        state.partial = None
        state.request_meta["ttft_ms"] = reply.ttft_ms
        state.steps += 1
        state.usage = state.usage + reply.usage
        state.cost += reply.priced.usd
        state.messages.append(reply.message)
        if reply.session is not None:
            state.session = reply.session
        calls = [
            ToolCall(b["id"], b["name"], None if b["id"] in reply.invalid_inputs else b["input"],
                     reply.invalid_inputs.get(b["id"], ""))
            for b in reply.message["content"] if b["type"] == "tool_use"
        ]
        final = _final_reason(reply.stop_reason, bool(calls))
        if final is None and state.usage.total_tokens >= caps.max_turn_tokens:
            final = "token_cap"
        # Tool calls we will not run are closed by history rebuilding (synthetic error results).
        await sink.on_reply(state.steps, reply, final)
        if final is not None:
            return Outcome(final)
        if not calls:  # pause_turn: nothing to run, persist before calling again
            await sink.flush()
            continue
        holds = await _holds(turn, state, hooks, calls, tools)
        held = {h.call.id for h in holds}
        running = [c for c in calls if c.id not in held]
        if running:
            await fence()  # the model's reply may have arrived long after the lease ran out
        results = await _run_tools(turn, state, tools, running, sink, services) \
            if running else []
        if holds:
            await sink.on_held(state.steps, results, holds)
            return Outcome(HELD)
        await sink.on_tool_results(state.steps, results)
        state.messages.append({"role": "user", "content": [r.block() for r in results]})
        injected = await _inject(turn, state, hooks, sink)


async def _holds(
    turn: TurnContext, state: TurnState, hooks: Sequence[LoopHook], calls: list[ToolCall],
    tools: TurnTools,
) -> list[Hold]:
    """What the hooks keep from running among the step's valid calls (an invalid call is
    answered with its validation error, never held)."""
    offered = [c for c in calls if tools.registry.validate(c) is None]
    holds: list[Hold] = []
    for hook in hooks:
        if not offered:
            break
        found = list(await hook.hold(turn, state, offered, tools.registry))
        holds += found
        taken = {h.call.id for h in found}
        offered = [c for c in offered if c.id not in taken]
    return holds


async def _call(
    provider: Provider,
    request: ModelRequest,
    turn: TurnContext,
    prices: PriceTable,
    sink: StepSink,
    partial: PartialCall,
) -> ModelReply:
    """The model call. A fast one is written with the step before it (what the sink holds:
    the last step's reply and tool results) in one write; a slow one has that step persisted
    while it runs."""
    if not sink.holding:
        return await call_model(provider, request, turn, prices, sink.on_delta, partial)
    calling = asyncio.ensure_future(
        call_model(provider, request, turn, prices, sink.on_delta, partial))
    try:
        return await _flushed_once_slow(calling, sink, turn.caps.persist_calls_after)
    finally:
        if not calling.done():
            # A cut of the turn: the call records what it streamed before the turn's end
            # reads it (state.partial).
            calling.cancel()
            await asyncio.wait({calling})


async def _run_tools(
    turn: TurnContext,
    state: TurnState,
    tools: TurnTools,
    calls: list[ToolCall],
    sink: StepSink,
    services: Mapping[type, object],
) -> list[ToolOutcome]:
    def ctx_for(call: ToolCall) -> ToolContext:
        return ToolContext(turn.org_id, turn.thread_id, turn.turn_id, call.id, state.abort,
                           services)

    running = asyncio.ensure_future(tools.registry.run_all(
        calls, ctx_for, default_timeout=turn.caps.tool_timeout,
        result_limit=turn.caps.tool_result_chars,
    ))
    try:
        # Fast tools: the reply and its results become one write. Slow tools: the reply
        # (and its cost) is persisted while they run.
        return await _flushed_once_slow(running, sink, turn.caps.persist_calls_after)
    finally:
        running.cancel()


async def _flushed_once_slow(work: asyncio.Future[T], sink: StepSink, after: float) -> T:
    """`work`'s result; what the sink holds is written while `work` runs once it has taken
    longer than `after` seconds. The caller cancels `work` if this is cut."""
    done, _ = await asyncio.wait({work}, timeout=after)
    if not done:
        await sink.flush()
    return await work


async def _inject(
    turn: TurnContext, state: TurnState, hooks: Sequence[LoopHook], sink: StepSink
) -> list[dict[str, Any]]:
    """Persist, then inject, what the hooks have for the model; returns what the next
    call's record says was injected (kind, source, size)."""
    items: list[Injection] = []
    for hook in hooks:
        items.extend(await hook.between_steps(turn, state))
    if not items:
        return []
    records = await sink.on_injected(state.steps, items)  # persist, then inject
    state.messages[-1]["content"].extend(injected_blocks(records))
    return [{"kind": r["kind"], "source": r["data"].get("source"),
             "chars": len(str(r["data"].get("text", "")))} for r in records]


async def _shrink(
    turn: TurnContext, state: TurnState, hooks: Sequence[LoopHook], error: ProviderError
) -> bool:
    """Ask every hook to make the retried request smaller; True if one will."""
    will = False
    for hook in hooks:
        will = await hook.on_overflow(turn, state, error) or will
    return will


def _after_retry(error: ProviderError, state: TurnState) -> str:
    tried = state.request_meta.get("compaction")
    what = "compacted the conversation" if tried else "made the request smaller"
    sizes = (f" ({tried.get('bytes_before')} -> {tried.get('bytes_after')} bytes)"
             if isinstance(tried, dict) else "")
    return (f"{error.message}; ator {what}{sizes} and retried once, and the provider "
            "still refused the request as too long")


def _final_reason(stop_reason: str, has_calls: bool) -> str | None:
    if stop_reason == "tool_use" and has_calls:
        return None
    if stop_reason == "pause_turn":
        return None
    if stop_reason in ("end_turn", "stop_sequence", "tool_use"):
        return "end_turn"
    return stop_reason  # max_tokens, refusal


async def call_model(
    provider: Provider,
    request: ModelRequest,
    turn: TurnContext,
    prices: PriceTable,
    on_delta: Callable[[StreamEvent], None],
    partial: PartialCall,
) -> ModelReply:
    """One model call, with transient errors retried (jitter, `retry-after`) up to the
    turn's `provider_retries`. `partial` collects what streams (and what the provider says it
    consumed) so a call cut short can be billed; `on_delta` sees each content event.

    Raises ProviderError (not retryable, or retries spent) and TimeoutError (stalled)."""
    attempt = 0
    while True:
        try:
            partial.blocks.clear()  # a retried attempt starts afresh
            partial.meter = UsageMeter()
            return await _call_once(provider, request, turn, prices, on_delta, partial)
        except ProviderError as exc:
            if not exc.retryable or attempt >= turn.caps.provider_retries:
                raise
            attempt += 1
            backoff = min(30.0, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
            await asyncio.sleep(max(exc.retry_after or 0.0, backoff))


async def _call_once(
    provider: Provider,
    request: ModelRequest,
    turn: TurnContext,
    prices: PriceTable,
    on_delta: Callable[[StreamEvent], None],
    partial: PartialCall,
) -> ModelReply:
    started = time.perf_counter()
    tool_blocks: dict[str, Block] = {}
    invalid: dict[str, str] = {}
    stop: MessageStop | None = None
    loop = asyncio.get_running_loop()
    stall = turn.caps.stall_timeout
    slack = min(1.0, stall / 20)
    first_content: float | None = None
    stream = provider.stream(request)
    try:
        async with asyncio.timeout(stall) as watchdog:
            async for event in stream:
                # Any provider event (keepalives included) proves the stream is alive. Moving
                # a timer costs a heap operation, so it moves only once it has fallen `slack`
                # behind: a stall is cut after between `stall - slack` and `stall` seconds.
                now = loop.time()
                if now + stall - (watchdog.when() or now) > slack:
                    watchdog.reschedule(now + stall)
                partial.meter.observe(event)
                if isinstance(event, Keepalive | UsageUpdate):
                    continue  # signs of life and running usage: nothing to show or assemble
                if first_content is None:
                    first_content = time.perf_counter()
                on_delta(event)
                _assemble(event, partial, tool_blocks, invalid)
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
    # A cost the provider reported is what it charged: preferred over the catalog's figure.
    priced = Priced.reported(stop.cost_usd) if stop.cost_usd is not None else \
        prices.cost(request.model if prices.lookup(request.model) else model, stop.usage)
    return ModelReply(
        message={"role": "assistant", "content": partial.blocks},
        stop_reason=stop.stop_reason,
        usage=stop.usage,
        priced=priced,
        duration_ms=int((time.perf_counter() - started) * 1000),
        invalid_inputs=invalid,
        ttft_ms=None if first_content is None else int((first_content - started) * 1000),
        session=stop.session,
    )


def _assemble(
    event: StreamEvent, partial: PartialCall, tool_blocks: dict[str, Block],
    invalid: dict[str, str],
) -> None:
    blocks = partial.blocks
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
    elif isinstance(event, NativeToolCall):  # the provider ran it: kept, never run here
        blocks.append({"type": "native_tool_call", "id": event.id, "name": event.name,
                       "input": event.input})
    elif isinstance(event, NativeToolResult):
        blocks.append({"type": "native_tool_result", "tool_use_id": event.id,
                       "content": event.content, "is_error": event.is_error})
