"""The step writer: every persisted transition of a turn, one statement each (layer: engine;
imports agent, store, engine.publish, obs, outcome, whole).

The loop reports to a `StepWriter` (it implements the loop's `StepSink`). Each transition —
a model reply, a batch of tool results, injected notifications, a compaction summary with
its billed call, the turn's end, a reply cut short — is one `write_step` composed from parts
(events, a billed model call, the snapshot, the end, and whatever a feature adds),
committed, then announced. A cut of the turn (its timeout, a stop) never lands inside a
write: the write, its bookkeeping and its announcement finish first (ator.whole).

A feature that must act when a turn ends (a subagent pushing its result to its parent)
is a `TurnEnd`: its `parts` join the final write's statement (same transaction as the
turn's end), and `committed` runs after that write committed (to wake someone).

A model reply that asked for tools is held until its tool results arrive, so a step with
fast tools is one write (assistant message, model call and results together). The loop calls
`flush()` when tools are slow, so the call and its cost are durable while they run. Whatever
is held is written with the turn's end if the turn stops first.

That tool step is written behind: its statement is sent before `on_tool_results` returns,
and the loop prepares the next request (hooks, the inspector's record) while it commits.
`settle()` waits for it; the loop settles before the next model call is sent (and before
hooks that read the turn's spend), and every other write settles first, so what the turn
does next is never ahead of what is durable, and events keep their order. The write is its
own task: a cut of the turn meanwhile leaves it to finish, and the turn's end settles it.

The writer holds no reference to what created it: it is given the database, a publisher,
metrics and the turn's ids and state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from ator.agent.extension import TurnEnd
from ator.agent.hooks import HELD, Hold, Injection
from ator.agent.loop import ModelReply
from ator.agent.state import TurnContext, TurnState
from ator.cost.price import Priced
from ator.engine.publish import Publisher
from ator.errors import AtorError
from ator.obs.metrics import Metrics
from ator.outcome import status_of
from ator.providers.base import StreamEvent
from ator.store import turns as turn_store
from ator.store.database import Database
from ator.store.provider_state import SessionSaved
from ator.store.scope import Scope
from ator.tools.base import ToolOutcome
from ator.whole import whole

__all__ = ["StepWriter", "TurnEnd", "TurnLost"]

Item = tuple[str, dict[str, Any]]


class TurnLost(AtorError):
    """The turn was closed elsewhere (the reaper, or a newer owner) or this replica lost its
    lease: stop running it and write nothing more."""

    kind = "lost"
    code = "turn_lost"


@dataclass
class _Held:
    event: Item
    call: turn_store.ModelCallRow
    message: dict[str, Any]  # the reply as the loop holds it, stamped with its seq once written
    parts: tuple[turn_store.StepPart, ...] = ()  # written with the reply (its provider state)


def _stamp(held: _Held, written: list[Any]) -> None:
    """Mark the loop's copy of a persisted reply with its event's seq: compaction names the
    history it replaces by seq, and cuts only before an assistant message."""
    for event in written:
        if event.kind == "assistant":
            held.message["seq"] = event.seq
            return


class StepWriter:
    def __init__(
        self,
        *,
        db: Database,
        publisher: Publisher,
        metrics: Metrics,
        turn: TurnContext,
        state: TurnState,
        snapshot: turn_store.Snapshot | None,
        ends: Sequence[TurnEnd] = (),
    ) -> None:
        self._db = db
        self._publisher = publisher
        self._metrics = metrics
        self._turn = turn
        self._state = state
        self._scope = Scope(turn.org_id)
        self._snapshot = snapshot  # written with the first write
        self._held: _Held | None = None
        self._ends = tuple(ends)
        self._sources: set[str] = set()  # where the turn's billed costs came from
        self._behind: asyncio.Future[Any] | None = None  # the tool step being committed
        self.finished = False

    # The loop's StepSink ---------------------------------------------------------------

    async def on_reply(self, step: int, reply: ModelReply, final: str | None) -> None:
        event: Item = ("assistant", {"content": reply.message["content"],
                                     "stop_reason": reply.stop_reason, "step": step})
        call = self._call_row(step, reply.stop_reason, reply.usage, reply.priced,
                              reply.duration_ms)
        # The provider's state for the thread commits with the reply that returned it.
        parts = () if reply.session is None else (
            SessionSaved(self._turn.provider, dict(reply.session)),)
        if final is None:
            self._held = _Held(event, call, reply.message, parts)
            return
        await self._write([event, self._ended(final, None)], billed=call,
                          finish=turn_store.Finished(status_of(final), final, None),
                          extra=parts)

    async def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            _stamp(held, await self._write([held.event], billed=held.call, extra=held.parts))

    async def on_tool_results(self, step: int, results: list[ToolOutcome]) -> None:
        """Sends the step's write and returns while it commits (`settle` waits for it)."""
        item: Item = ("tool_results", {"step": step, "results": [r.record() for r in results]})
        held, self._held = self._held, None
        await self.settle()
        if held is None:
            await self._write_behind(self._commit(*self._parts([item])))
        else:
            await self._write_behind(self._stamped(held, self._commit(*self._parts(
                [held.event, item], billed=held.call, extra=held.parts))))

    async def settle(self) -> None:
        """Return once the write sent behind (if any) is durable; raises what it failed with
        (once). A cut of the caller leaves the write running, for the turn's end to settle."""
        behind = self._behind
        if behind is None:
            return
        try:
            await asyncio.shield(behind)
        finally:
            if behind.done():
                self._behind = None

    async def on_held(self, step: int, results: list[ToolOutcome],
                      holds: Sequence[Hold]) -> None:
        """The reply, the results of the calls that ran, every hold's parts and the turn's
        end (`held`, status `waiting`): one statement, so a pending action exists exactly
        when the turn says it waits for it."""
        held, self._held = self._held, None
        items: list[Item] = [held.event] if held else []
        if results:
            items.append(("tool_results", {"step": step,
                                           "results": [r.record() for r in results]}))
        notes = [{"tool_use_id": h.call.id, "name": h.call.name, **h.note} for h in holds]
        items.append(self._ended(HELD, None, held=notes))
        extra = [*(held.parts if held else ()), *(p for h in holds for p in h.parts)]
        await self._write(items, billed=held.call if held else None,
                          finish=turn_store.Finished(status_of(HELD), HELD, None), extra=extra)

    async def on_compaction(self, step: int, reply: ModelReply, record: dict[str, Any],
                            meta: dict[str, Any]) -> None:
        await self.flush()  # a held reply bills its own call first (one call per write)
        call = self._call_row(step, reply.stop_reason, reply.usage, reply.priced,
                              reply.duration_ms, "compaction",
                              model=str(record.get("model") or self._turn.model), meta=meta)
        await self._write([("compaction", {**record, "step": step})], billed=call)

    async def on_injected(self, step: int, items: Sequence[Injection]) -> list[dict[str, Any]]:
        drained = tuple(m for i in items for m in i.mailbox_ids)
        events = await self._write([(i.kind, {**i.data, "step": step}) for i in items],
                                   extra=[turn_store.Drained(drained)] if drained else [])
        return [{"kind": e.kind, "data": e.data} for e in events]

    def on_delta(self, event: StreamEvent) -> None:
        self._publisher.delta(self._turn.thread_id, self._turn.turn_id, event)

    # The turn's end ----------------------------------------------------------------------

    async def finish(
        self, stop_reason: str, error: str | None,
        interrupted: tuple[Item | None, turn_store.ModelCallRow] | None = None,
    ) -> None:
        """Close the turn when the loop did not (caps before a call, errors, stops): the held
        reply and a cut-short call's partial reply (billed) are written with the end."""
        held, self._held = self._held, None
        items: list[Item] = [held.event] if held else []
        billed = held.call if held else None
        extra: tuple[turn_store.StepPart, ...] = held.parts if held else ()
        if interrupted is not None:
            if billed is not None:  # two calls to bill: the held one goes first, on its own
                await self._write(items, billed=billed, extra=extra)
                items, extra = [], ()
            if interrupted[0] is not None:
                items.append(interrupted[0])
            billed = interrupted[1]
        items.append(self._ended(stop_reason, error))
        try:
            await self._write(items, billed=billed,
                              finish=turn_store.Finished(status_of(stop_reason), stop_reason,
                                                         error), extra=extra)
        except TurnLost:
            self.finished = True  # closed elsewhere already: nothing more to say

    def _ended(self, stop_reason: str, error: str | None,
               held: list[dict[str, Any]] | None = None) -> Item:
        s = self._state
        data: dict[str, Any] = {
            "turn_id": str(self._turn.turn_id), "status": status_of(stop_reason),
            "stop_reason": stop_reason, "error": error, "steps": s.steps,
            "usage": asdict(s.usage), "cost_usd": str(s.cost),
            "cost_source": _cost_source(self._sources),
        }
        if held:
            data["held"] = held  # tool calls answered later, by a decision (agent/history)
        return ("turn_ended", data)

    def _call_row(self, step: int, stop_reason: str | None, usage: Any, priced: Priced,
                  duration_ms: int, purpose: str = "step", *,
                  model: str | None = None, meta: dict[str, Any] | None = None,
                  ) -> turn_store.ModelCallRow:
        self._sources.add(priced.source)
        return turn_store.ModelCallRow(
            step=step, provider=self._turn.provider, model=model or self._turn.model,
            stop_reason=stop_reason, input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens, cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens, usage_reported=usage.reported,
            usage_estimated=usage.estimated,
            cost_usd=priced.usd, priced=priced.priced, duration_ms=duration_ms,
            request_meta=self._state.request_meta if meta is None else meta,
            setup_id=self._turn.setup_id,
            purpose=purpose, cost_source=priced.source,
        )

    def interrupted_call(
        self, priced: Priced
    ) -> tuple[Item | None, turn_store.ModelCallRow] | None:
        """The call in flight when the turn was cut short, as an `interrupted` assistant
        event (none for a compaction call: its text is no reply) and its billed row; None
        when nothing was streamed or reported."""
        partial = self._state.partial
        if partial is None:
            return None
        usage = partial.usage()
        text = [b for b in partial.blocks if b["type"] == "text" and b.get("text")]
        if not text and usage.total_tokens == 0:
            return None
        if partial.purpose == "compaction":
            return None, self._call_row(partial.step, None, usage, priced, 0,
                                        "compaction", model=partial.model,
                                        meta={"purpose": "compaction", "interrupted": True})
        event: Item = ("assistant", {"content": partial.blocks, "stop_reason": None,
                                     "step": partial.step, "interrupted": True})
        return event, self._call_row(partial.step, None, usage, priced, 0, "interrupted")

    # Writing -----------------------------------------------------------------------------

    async def _write(
        self,
        items: list[Item],
        *,
        billed: turn_store.ModelCallRow | None = None,
        finish: turn_store.Finished | None = None,
        extra: Sequence[turn_store.StepPart] = (),
    ) -> list[Any]:
        await self.settle()  # in order: after the write sent behind
        # A cut (the turn's timeout, a stop) waits for the write and what follows it: the
        # caller's state then matches what committed, and what committed is announced.
        return await whole(self._commit(*self._parts(items, billed=billed, finish=finish,
                                                     extra=extra)))

    async def _write_behind(self, work: Coroutine[Any, Any, Any]) -> None:
        self._behind = asyncio.ensure_future(work)
        # Its failure is raised by `settle`; a turn that never settles it again (closed
        # elsewhere meanwhile) leaves nothing unretrieved.
        self._behind.add_done_callback(_retrieve)
        # One turn of the loop: the write sends its statement before the caller goes on.
        await asyncio.sleep(0)

    @staticmethod
    async def _stamped(held: _Held, work: Coroutine[Any, Any, list[Any]]) -> None:
        _stamp(held, await work)

    def _parts(
        self,
        items: list[Item],
        *,
        billed: turn_store.ModelCallRow | None = None,
        finish: turn_store.Finished | None = None,
        extra: Sequence[turn_store.StepPart] = (),
    ) -> tuple[list[Item], list[turn_store.StepPart], turn_store.ModelCallRow | None,
               turn_store.Finished | None]:
        """A write's parts; settles the call's reservation in the turn's state."""
        parts: list[turn_store.StepPart] = list(extra)
        # The reservation held for the call in flight is settled by the write that bills
        # it, or given back with the turn's end when the call never billed.
        released = self._state.reserved_usd
        if billed is not None:
            parts.append(turn_store.Billed(billed, released))
            self._state.reserved_usd = Decimal(0)
        elif finish is not None and released:
            parts.append(turn_store.Released(released))
            self._state.reserved_usd = Decimal(0)
        if finish is not None:
            parts.append(finish)
            for end in self._ends:
                parts.extend(end.parts(self._turn, self._state, finish))
        if self._snapshot is not None:
            parts.append(self._snapshot)
        return items, parts, billed, finish

    async def _commit(
        self,
        items: list[Item],
        parts: list[turn_store.StepPart],
        billed: turn_store.ModelCallRow | None,
        finish: turn_store.Finished | None,
    ) -> list[Any]:
        t = self._turn
        result = await turn_store.write_step(self._db, self._scope, t.thread_id, t.turn_id,
                                             items, steps=self._state.steps, parts=parts)
        self._snapshot = None
        if billed is not None:
            self._metrics.model_call(
                input=billed.input_tokens, output=billed.output_tokens,
                cache_read=billed.cache_read_tokens, cache_write=billed.cache_write_tokens,
                usd=billed.cost_usd,
            )
        if not result.live:
            self.finished = True
            raise TurnLost("the turn was closed elsewhere (reaped, or taken by another owner)")
        for kind, data in items:
            if kind == "tool_results":
                for r in data["results"]:
                    self._metrics.tool_call(is_error=r["is_error"])
        if finish is not None:
            self.finished = True
            self._metrics.turn_ended(finish.status, finish.stop_reason)
        await self._publisher.events(self._scope, t.thread_id, result.events)
        if finish is not None:
            for end in self._ends:
                await end.committed(self._turn, result)
        return result.events


def _retrieve(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()


def _cost_source(sources: set[str]) -> str | None:
    """How the turn's cost was measured: the one source of all its billed calls, `mixed`
    when they differ, None when nothing was billed."""
    if not sources:
        return None
    return next(iter(sources)) if len(sources) == 1 else "mixed"
