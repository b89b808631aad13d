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

What the loop reports is held for the next write when nothing needs it durable yet: a model
reply that asked for tools is held while they run, and the step (the reply, its call and the
tool results) is held while the next model call runs. Every write carries what is held
first, in order, with the calls it bills, so a turn whose tools and model are fast is one
write at its end. The loop calls `flush()` once what it waits on is slow (tools, or the next
call, past `persist_calls_after`) and before anything reads what the writes change (a hook
reading the turn's spend, a compaction naming history by seq): a call and its cost, and a
tool's result, are durable while the slow part runs. Whatever is held is written with the
turn's end if the turn stops first.

The writer holds no reference to what created it: it is given the database, a publisher,
metrics and the turn's ids and state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
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
    """What the next write carries first, in the order it was reported."""

    items: list[Item] = field(default_factory=list)
    calls: list[turn_store.ModelCallRow] = field(default_factory=list)  # billed, in order
    # The loop's copies of the held replies, stamped with their events' seqs once written.
    replies: list[dict[str, Any]] = field(default_factory=list)
    parts: list[turn_store.StepPart] = field(default_factory=list)  # a reply's provider state

    def __bool__(self) -> bool:
        return bool(self.items)


def _stamp(replies: list[dict[str, Any]], written: list[Any]) -> None:
    """Mark the loop's copies of persisted replies with their events' seqs: compaction names
    the history it replaces by seq, and cuts only before an assistant message. The held
    replies are the write's first assistant events, in order."""
    for reply, event in zip(replies, (e for e in written if e.kind == "assistant"),
                            strict=False):
        reply["seq"] = event.seq


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
        self._held = _Held()
        self._ends = tuple(ends)
        self._sources: set[str] = set()  # where the turn's billed costs came from
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
            held = self._held
            held.items.append(event)
            held.calls.append(call)
            held.replies.append(reply.message)
            held.parts.extend(parts)
            return
        await self._write([event, self._ended(final, None)], billed=[call],
                          finish=turn_store.Finished(status_of(final), final, None),
                          extra=parts)

    async def flush(self) -> None:
        if self._held:
            await self._write([])

    @property
    def holding(self) -> bool:
        return bool(self._held)

    async def on_tool_results(self, step: int, results: list[ToolOutcome]) -> None:
        """Held: written with the next write, or by `flush` once the next call is slow."""
        self._held.items.append(
            ("tool_results", {"step": step, "results": [r.record() for r in results]}))

    async def on_held(self, step: int, results: list[ToolOutcome],
                      holds: Sequence[Hold]) -> None:
        """The reply, the results of the calls that ran, every hold's parts and the turn's
        end (`held`, status `waiting`): one statement, so a pending action exists exactly
        when the turn says it waits for it."""
        items: list[Item] = []
        if results:
            items.append(("tool_results", {"step": step,
                                           "results": [r.record() for r in results]}))
        notes = [{"tool_use_id": h.call.id, "name": h.call.name, **h.note} for h in holds]
        items.append(self._ended(HELD, None, held=notes))
        await self._write(items, finish=turn_store.Finished(status_of(HELD), HELD, None),
                          extra=[p for h in holds for p in h.parts])

    async def on_compaction(self, step: int, reply: ModelReply, record: dict[str, Any],
                            meta: dict[str, Any]) -> None:
        call = self._call_row(step, reply.stop_reason, reply.usage, reply.priced,
                              reply.duration_ms, "compaction",
                              model=str(record.get("model") or self._turn.model), meta=meta)
        await self._write([("compaction", {**record, "step": step})], billed=[call])

    async def on_injected(self, step: int, items: Sequence[Injection]) -> list[dict[str, Any]]:
        drained = tuple(m for i in items for m in i.mailbox_ids)
        events = await self._write([(i.kind, {**i.data, "step": step}) for i in items],
                                   extra=[turn_store.Drained(drained)] if drained else [])
        # The write's last events are these (what was held comes first).
        return [{"kind": e.kind, "data": e.data} for e in events[len(events) - len(items):]]

    def on_delta(self, event: StreamEvent) -> None:
        self._publisher.delta(self._turn.thread_id, self._turn.turn_id, event)

    # The turn's end ----------------------------------------------------------------------

    async def finish(
        self, stop_reason: str, error: str | None,
        interrupted: tuple[Item | None, turn_store.ModelCallRow] | None = None,
    ) -> None:
        """Close the turn when the loop did not (caps before a call, errors, stops): what is
        held and a cut-short call's partial reply (billed) are written with the end."""
        items: list[Item] = []
        billed: list[turn_store.ModelCallRow] = []
        if interrupted is not None:
            if interrupted[0] is not None:
                items.append(interrupted[0])
            billed.append(interrupted[1])
        items.append(self._ended(stop_reason, error))
        try:
            await self._write(items, billed=billed,
                              finish=turn_store.Finished(status_of(stop_reason), stop_reason,
                                                         error))
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
        billed: Sequence[turn_store.ModelCallRow] = (),
        finish: turn_store.Finished | None = None,
        extra: Sequence[turn_store.StepPart] = (),
    ) -> list[Any]:
        """One statement: what is held, then `items`, billing the held calls and `billed`.
        A cut (the turn's timeout, a stop) waits for the write and what follows it: the
        caller's state then matches what committed, and what committed is announced."""
        held, self._held = self._held, _Held()
        written = await whole(self._commit(
            [*held.items, *items], [*held.parts, *extra], [*held.calls, *billed], finish))
        _stamp(held.replies, written)
        return written

    def _parts(
        self,
        extra: list[turn_store.StepPart],
        billed: list[turn_store.ModelCallRow],
        finish: turn_store.Finished | None,
    ) -> list[turn_store.StepPart]:
        """A write's parts; settles the calls' reservation in the turn's state."""
        parts = extra
        # The reservation held for the call in flight is settled by the write that bills
        # it, or given back with the turn's end when the call never billed.
        released = self._state.reserved_usd
        if billed:
            parts.append(turn_store.Billed(tuple(billed), released))
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
        return parts

    async def _commit(
        self,
        items: list[Item],
        extra: list[turn_store.StepPart],
        billed: list[turn_store.ModelCallRow],
        finish: turn_store.Finished | None,
    ) -> list[Any]:
        t = self._turn
        parts = self._parts(extra, billed, finish)
        result = await turn_store.write_step(self._db, self._scope, t.thread_id, t.turn_id,
                                             items, steps=self._state.steps, parts=parts)
        self._snapshot = None
        for call in billed:
            self._metrics.model_call(
                input=call.input_tokens, output=call.output_tokens,
                cache_read=call.cache_read_tokens, cache_write=call.cache_write_tokens,
                usd=call.cost_usd,
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


def _cost_source(sources: set[str]) -> str | None:
    """How the turn's cost was measured: the one source of all its billed calls, `mixed`
    when they differ, None when nothing was billed."""
    if not sources:
        return None
    return next(iter(sources)) if len(sources) == 1 else "mixed"
