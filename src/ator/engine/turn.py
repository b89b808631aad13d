"""Running one turn of a thread (layer: engine; imports agent, providers, tools, store, coord,
cost, security).

`TurnRunner.run` is called by the actor while it holds the thread's lease:

  load context (1 read) → freeze config → begin turn: drain *all* pending items and persist
  them as events (1 write) → rebuild history from events → agent loop, persisting every
  model reply and every batch of tool results as it completes (1 write each) → finish with a
  typed stop reason (folded into the last write when the model ended the turn).

Persist, then emit: each write's events are published on the coordinator channel
`thread:<id>` only after the write committed. Token deltas are the one ephemeral exception;
they go to in-process listeners only and are marked `ephemeral`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator.agent.history import build_messages
from ator.agent.loop import Budget, LoopOutcome, ModelReply, run_loop
from ator.agent.prompt import build_system
from ator.context import org_id_var, thread_id_var, turn_id_var
from ator.coord.base import Coordinator
from ator.cost.prices import PriceTable
from ator.engine.config import FrozenConfig, freeze
from ator.errors import AtorError
from ator.obs.logging import get_logger
from ator.obs.metrics import Metrics
from ator.providers.base import StreamEvent, Usage
from ator.providers.registry import ProviderRegistry
from ator.store import secrets as secret_store
from ator.store import turns as turn_store
from ator.store.database import Database
from ator.store.events import HISTORY_KINDS
from ator.store.records import Event
from ator.store.scope import Scope
from ator.tools.base import ToolCall, ToolContext, ToolOutcome
from ator.tools.registry import ToolRegistry

__all__ = ["TurnHandle", "TurnRunner", "status_of", "thread_channel"]

log = get_logger("ator.engine.turn")


def thread_channel(thread_id: UUID | str) -> str:
    return f"thread:{thread_id}"


def status_of(stop_reason: str) -> str:
    if stop_reason.startswith("cancelled:"):
        return "cancelled"
    if stop_reason.startswith("error:"):
        return "error"
    return "done"


@dataclass
class TurnHandle:
    """A running turn, as the actor sees it: stop() sets the reason and cancels the task."""

    turn_id: UUID
    task: asyncio.Task[Any]
    reason: str | None = None

    started: bool = False

    def stop(self, reason: str) -> None:
        """Ask the turn to stop. Before its first statement committed, the stop is kept and
        applied right after it (cancelling mid-statement would leave its outcome unknown)."""
        if self.reason is None:
            self.reason = reason
            if self.started:
                self.task.cancel()


@dataclass
class _Sink:
    """Persists what the loop reports, then publishes it.

    A model reply that asked for tools is held until its tool results arrive, so a step with
    fast tools is one write (assistant message, model call and results together). The loop
    calls `flush()` when tools are slow, so the call and its cost are durable while they run.
    Whatever is held is written with the turn's end if the turn stops first."""

    runner: TurnRunner
    scope: Scope
    thread_id: UUID
    turn_id: UUID
    setup_id: UUID
    provider: str
    budget: Budget
    request_meta: dict[str, Any]
    snapshot: tuple[dict[str, Any], str] | None = None  # written with the first write
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: Decimal = Decimal(0)
    finished: bool = False
    lost: bool = False
    _held: tuple[tuple[str, dict[str, Any]], turn_store.ModelCallRow] | None = None

    async def on_reply(self, step: int, reply: ModelReply, final: str | None) -> None:
        self.steps = step
        self.usage = self.usage + reply.usage
        self.cost += reply.priced.usd
        event = ("assistant", {"content": reply.message["content"],
                               "stop_reason": reply.stop_reason, "step": step})
        call = turn_store.ModelCallRow(
            step=step, provider=self.provider, model=self.request_meta["model"],
            stop_reason=reply.stop_reason, input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            cache_read_tokens=reply.usage.cache_read_tokens,
            cache_write_tokens=reply.usage.cache_write_tokens,
            usage_reported=reply.usage.reported, cost_usd=reply.priced.usd,
            priced=reply.priced.priced, duration_ms=reply.duration_ms,
            request_meta=self.request_meta, setup_id=self.setup_id,
        )
        if final is None:
            self._held = (event, call)
            return
        await self._write([event, ("turn_ended", self._ended(final, None))], model_call=call,
                          finish=(status_of(final), final, None))

    async def flush(self) -> None:
        if self._held is not None:
            event, call = self._held
            self._held = None
            await self._write([event], model_call=call)

    async def on_tool_results(self, step: int, results: list[ToolOutcome]) -> None:
        data = {
            "step": step,
            "results": [
                {**r.block(), "name": r.name, "duration_ms": r.duration_ms,
                 "truncated_from": r.truncated_from}
                for r in results
            ],
        }
        held, self._held = self._held, None
        if held is None:
            await self._write([("tool_results", data)])
        else:
            await self._write([held[0], ("tool_results", data)], model_call=held[1])

    def on_delta(self, event: StreamEvent) -> None:
        self.runner.emit_delta(self.thread_id, self.turn_id, event)

    async def finish(self, stop_reason: str, error: str | None) -> None:
        """Close the turn when the loop did not (caps before a call, errors, cancellation)."""
        held, self._held = self._held, None
        items = ([held[0]] if held else []) + [("turn_ended", self._ended(stop_reason, error))]
        await self._write(items, model_call=held[1] if held else None,
                          finish=(status_of(stop_reason), stop_reason, error))

    def _ended(self, stop_reason: str, error: str | None) -> dict[str, Any]:
        return {
            "turn_id": str(self.turn_id), "status": status_of(stop_reason),
            "stop_reason": stop_reason, "error": error, "steps": self.steps,
            "usage": asdict(self.usage), "cost_usd": str(self.cost),
        }

    async def _write(
        self,
        items: list[tuple[str, dict[str, Any]]],
        *,
        model_call: turn_store.ModelCallRow | None = None,
        finish: tuple[str, str, str | None] | None = None,
    ) -> None:
        snapshot, self.snapshot = self.snapshot, None
        result = await turn_store.write_step(
            self.runner.db, self.scope, self.thread_id, self.turn_id, items,
            steps=self.steps, model_call=model_call, finish=finish, snapshot=snapshot,
        )
        if result.month_usd is not None:
            self.budget.spent = result.month_usd
        if not result.live:
            # The reaper or a newer owner closed this turn: stop writing, stop running.
            self.lost = True
            self.finished = True
            raise asyncio.CancelledError("turn no longer running")
        metrics = self.runner.metrics
        if model_call is not None:
            metrics.model_call(
                input=model_call.input_tokens, output=model_call.output_tokens,
                cache_read=model_call.cache_read_tokens,
                cache_write=model_call.cache_write_tokens, usd=model_call.cost_usd,
            )
        for kind, data in items:
            if kind == "tool_results":
                for r in data["results"]:
                    metrics.tool_call(is_error=r["is_error"])
        if finish is not None:
            self.finished = True
            metrics.turn_ended(finish[0], finish[1])
        await self.runner.publish(self.scope, self.thread_id, result.events)


class TurnRunner:
    def __init__(
        self,
        *,
        db: Database,
        coord: Coordinator,
        providers: ProviderRegistry,
        tools: ToolRegistry,
        prices: PriceTable,
        master_key: Any,
        owner: str,
        engine_version: str,
        budget_fail_closed: bool,
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.db = db
        self.coord = coord
        self.providers = providers
        self.tools = tools
        self.prices = prices
        self.master_key = master_key
        self.owner = owner
        self.engine_version = engine_version
        self.budget_fail_closed = budget_fail_closed
        self.delta_listeners: dict[UUID, list[Callable[[dict[str, Any]], None]]] = {}

    async def publish(self, scope: Scope, thread_id: UUID, events: list[Event]) -> None:
        if not events:
            return
        notice = {
            "org_id": str(scope.org_id),
            "thread_id": str(thread_id),
            "seq": events[-1].seq,
            "events": [
                {"seq": e.seq, "kind": e.kind, "data": e.data,
                 "turn_id": str(e.turn_id) if e.turn_id else None}
                for e in events
            ],
        }
        await self.coord.publish(thread_channel(thread_id), json.dumps(notice, default=str))

    def emit_delta(self, thread_id: UUID, turn_id: UUID, event: StreamEvent) -> None:
        listeners = self.delta_listeners.get(thread_id)
        if not listeners:
            return
        frame = {"type": type(event).__name__, "turn_id": str(turn_id), "ephemeral": True,
                 **{k: v for k, v in asdict(event).items() if k != "usage"}}
        for listener in list(listeners):
            listener(frame)

    async def run(
        self, scope: Scope, thread_id: UUID, on_start: Callable[[TurnHandle], None]
    ) -> bool:
        """Run one turn if anything is pending; False when the mailbox was empty."""
        turn_id = uuid.uuid4()
        token_org = org_id_var.set(str(scope.org_id))
        token_turn = turn_id_var.set(str(turn_id))
        token_thread = thread_id_var.set(str(thread_id))
        try:
            task = asyncio.current_task()
            assert task is not None
            handle = TurnHandle(turn_id, task)
            on_start(handle)  # from here a stop is kept, and applied once the turn exists
            ctx, started = await turn_store.start_turn(
                self.db, scope, thread_id, turn_id, owner=self.owner
            )
            if not started:
                return False
            await self.publish(scope, thread_id, started)
            frozen: FrozenConfig | AtorError
            try:
                frozen = freeze(ctx, engine_version=self.engine_version)
                snapshot = (frozen.snapshot, frozen.hash)
            except AtorError as exc:  # the turn still runs, to record why it cannot
                frozen = exc
                snapshot = ({"error": exc.message}, "invalid")
            history = ctx.history + [
                {"kind": e.kind, "data": e.data} for e in started if e.kind in HISTORY_KINDS
            ]
            budget = Budget(ctx.monthly_budget_usd, ctx.month_usd, self.budget_fail_closed)
            sink = _Sink(self, scope, thread_id, turn_id, ctx.setup_id, ctx.provider, budget,
                         {"model": ctx.model}, snapshot)
            handle.started = True
            if handle.reason is not None:  # stopped while the turn was being created
                lost = handle.reason == "lost"
                stop = "error:lost" if lost else f"cancelled:{handle.reason}"
                error = "this replica lost the turn's lease" if lost else None
            else:
                stop, error = await self._drive(ctx, frozen, history, sink, handle, scope,
                                                thread_id, turn_id)
            if not sink.finished:
                await asyncio.shield(sink.finish(stop, error))
            return True
        finally:
            turn_id_var.reset(token_turn)
            thread_id_var.reset(token_thread)
            org_id_var.reset(token_org)

    async def _drive(
        self,
        ctx: turn_store.TurnContext,
        frozen: FrozenConfig | AtorError,
        history: list[dict[str, Any]],
        sink: _Sink,
        handle: TurnHandle,
        scope: Scope,
        thread_id: UUID,
        turn_id: UUID,
    ) -> tuple[str, str | None]:
        if isinstance(frozen, AtorError):
            return f"error:{frozen.kind}", frozen.message
        try:
            async with asyncio.timeout(frozen.caps.turn_timeout):
                outcome = await self._loop(ctx, frozen, history, sink, scope, thread_id, turn_id)
            return outcome.stop_reason, outcome.error
        except TimeoutError:
            return "timeout", f"turn exceeded {frozen.caps.turn_timeout:g}s"
        except asyncio.CancelledError:
            if handle.reason is None and not sink.lost:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if sink.lost or handle.reason == "lost":
                return "error:lost", "this replica lost the turn (lease or row closed elsewhere)"
            return f"cancelled:{handle.reason}", None
        except AtorError as exc:
            return f"error:{exc.kind}", exc.message

    async def _loop(
        self,
        ctx: turn_store.TurnContext,
        frozen: FrozenConfig,
        history: list[dict[str, Any]],
        sink: _Sink,
        scope: Scope,
        thread_id: UUID,
        turn_id: UUID,
    ) -> LoopOutcome:
        async def resolve(name: str) -> str:
            return await secret_store.reveal(self.db, self.master_key, scope, name)

        provider = await self.providers.build(ctx.provider, ctx.config, resolve)
        tools = self.tools.filtered(frozen.allow, frozen.deny)
        specs = tools.specs(description_limit=frozen.caps.tool_description_chars)
        system, layers = build_system(persona=ctx.persona, instructions=ctx.instructions,
                                      tools=specs)
        sink.request_meta = {
            "model": ctx.model, "layers": layers, "tools": [t.name for t in specs],
            "config_hash": frozen.hash,
        }

        def ctx_for(call: ToolCall) -> ToolContext:
            return ToolContext(scope.org_id, thread_id, turn_id, call.id)

        return await run_loop(
            provider=provider, model=ctx.model, system=system,
            messages=build_messages(history), tools=tools, caps=frozen.caps,
            prices=self.prices, budget=sink.budget, sink=sink, ctx_for=ctx_for,
            user_id=f"ator-thread-{thread_id}", cache=frozen.cache,
        )
