"""Budgets through whole turns: every model call reserves its worst case first, so concurrent
turns cannot overshoot a nearly spent budget; a call cut short still bills what it used."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from ator import Ator, Scope
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.providers.size import request_tokens
from ator.store import ledger
from ator.store import turns as turn_store
from ator.store.schema import model_calls, org_usage, turns
from ator.tools.base import Tool, ToolContext
from tests.conftest import ended, wait_for_event

MODEL = "claude-haiku-4-5"


class Honest:
    """Reports exactly the input the request has (by the estimator) and 100 output tokens,
    after a short pause so the turns overlap."""

    name = "honest"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        await asyncio.sleep(0.05)
        yield TextDelta("ok")
        yield MessageStop("end_turn", Usage(request_tokens(request), 100), request.model)


async def _spend(ator: Ator, scope: Scope) -> tuple[Decimal, Decimal]:
    rows = await ator.db.read(sa.select(org_usage.c.cost_usd, org_usage.c.reserved_usd)
                              .where(org_usage.c.org_id == scope.org_id))
    return rows[0].cost_usd, rows[0].reserved_usd


async def test_forty_concurrent_turns_cannot_overshoot_a_nearly_spent_budget(make_ator) -> None:
    async with make_ator(providers={"h": Honest()}) as ator:
        org = await ator.create_org("nearly-spent", monthly_budget_usd=Decimal("1.00"))
        scope = Scope(org.id)
        # $0.99 already spent this month.
        await ator.db.write(sa.insert(org_usage).values(
            org_id=org.id, month=sa.func.date_trunc("month", sa.func.now()),
            cost_usd=Decimal("0.99"), tokens=0))
        setup = await ator.create_setup(scope, name="s", provider="h", model=MODEL,
                                        config={"caps": {"max_output_tokens": 500}})
        threads = [await ator.create_thread(scope, setup.id) for _ in range(40)]
        results = await asyncio.gather(*(ator.ask(scope, t.id, "hi", timeout=60)
                                         for t in threads))
        spent, reserved = await _spend(ator, scope)
        held = await ator.db.read(sa.select(sa.func.sum(turns.c.reserved_usd))
                                  .where(turns.c.org_id == org.id))
    done = [r for r in results if r.stop_reason == "end_turn"]
    refused = [r for r in results if r.stop_reason == "budget"]
    assert len(done) + len(refused) == 40
    # Each call's worst case is ~$0.0027 (input at the cache-write price + 500 output) and it
    # really costs less, so the remaining $0.01 admits a few calls (more as earlier ones
    # settle below their reservation) and refuses the rest, before they run.
    assert 1 <= len(done) <= 10 and len(refused) >= 30
    assert all(r.status == "budget" and r.cost_usd == 0 for r in refused)
    assert spent <= Decimal("1.00")
    assert spent == Decimal("0.99") + sum(r.cost_usd for r in done)
    # Every reservation was settled or given back.
    assert reserved == 0 and (held[0][0] or 0) == 0


class Trickle:
    """Streams a few words, then hangs; reports no usage (so output is estimated)."""

    name = "trickle"

    def __init__(self) -> None:
        self.streaming = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta("partial answer of some length")
        self.streaming.set()
        await asyncio.Event().wait()
        yield MessageStop("end_turn", Usage(), request.model)  # never reached


async def _submit_one(ator: Ator, provider: str, caps: dict[str, float]) -> tuple[Scope, Any]:
    """A new org with a $5 budget, and one thread of it sent "go" (a setup on `provider`
    with `caps`); returns the org's scope and the thread."""
    org = await ator.create_org(f"o-{uuid.uuid4().hex[:6]}", monthly_budget_usd=Decimal("5"))
    scope = Scope(org.id)
    setup = await ator.create_setup(scope, name="s", provider=provider, model=MODEL,
                                    config={"caps": caps})
    thread = await ator.create_thread(scope, setup.id)
    await ator.submit(scope, thread.id, "go")
    return scope, thread


async def _cut_short(make_ator, caps: dict[str, float], stop: bool) -> tuple[object, object]:
    provider = Trickle()
    async with make_ator(providers={"t": provider}) as ator:
        scope, thread = await _submit_one(ator, "t", caps)
        if stop:
            await asyncio.wait_for(provider.streaming.wait(), 10)
            await ator.stop(scope, thread.id)
        end = await wait_for_event(ator, scope, thread.id, ended, timeout=20)
        turn = await ator.turn(scope, end.turn_id)
        spent, reserved = await _spend(ator, scope)
    assert reserved == 0  # the reservation of the cut call was settled with it
    assert spent == turn.cost_usd
    return end.data["stop_reason"], turn


async def test_a_stopped_call_records_the_tokens_and_usd_it_consumed(make_ator) -> None:
    reason, turn = await _cut_short(make_ator, {}, stop=True)
    assert reason == "cancelled:user"
    assert turn.output_tokens > 0 and turn.cost_usd > 0  # type: ignore[attr-defined]


async def test_a_timed_out_call_records_the_tokens_and_usd_it_consumed(make_ator) -> None:
    reason, turn = await _cut_short(make_ator, {"turn_timeout": 0.5}, stop=False)
    assert reason == "timeout"
    assert turn.output_tokens > 0 and turn.cost_usd > 0  # type: ignore[attr-defined]


async def test_a_stalled_call_records_the_tokens_and_usd_it_consumed(make_ator) -> None:
    reason, turn = await _cut_short(make_ator, {"stall_timeout": 0.3}, stop=False)
    assert reason == "stalled"
    assert turn.output_tokens > 0 and turn.cost_usd > 0  # type: ignore[attr-defined]


async def test_a_turn_cut_while_its_reservation_commits_gives_it_back_at_its_end(
    make_ator, monkeypatch
) -> None:
    """The turn's timeout lands after the reservation committed but before the gate saw the
    answer (a busy loop): the turn's end still releases it, without waiting for a sweep."""
    real = ledger.reserve
    answered = asyncio.Event()

    async def committed_then_slow(*args: object, **kwargs: object) -> ledger.Reservation:
        held = await real(*args, **kwargs)  # type: ignore[arg-type]
        await asyncio.sleep(1.0)  # the loop is slow to hand the answer back
        answered.set()
        return held

    monkeypatch.setattr(ledger, "reserve", committed_then_slow)
    provider = Trickle()
    async with make_ator(providers={"t": provider}) as ator:
        scope, thread = await _submit_one(ator, "t", {"turn_timeout": 0.3})
        end = await wait_for_event(ator, scope, thread.id, ended, timeout=20)
        spent, reserved = await _spend(ator, scope)
        held = await ator.db.read(sa.select(turns.c.reserved_usd)
                                  .where(turns.c.id == end.turn_id))
    assert end.data["stop_reason"] == "timeout"
    assert not provider.streaming.is_set()  # the model was never called
    assert reserved == 0 and held[0][0] == 0 and spent == 0
    assert answered.is_set()  # the gate waited for the reservation's outcome


async def _ping(args: dict[str, object], ctx: ToolContext) -> str:
    return "pong"


async def test_a_turn_cut_before_its_billed_step_is_written_still_writes_and_bills_it(
    make_ator, monkeypatch
) -> None:
    """The turn's timeout lands while the step that bills a model call is on its way to the
    database: the write goes through first, so the call is billed (not lost with the cut)
    and its reservation settled."""
    real = turn_store.write_step
    delayed = asyncio.Event()

    async def slow_to_send(*args: Any, **kwargs: Any) -> turn_store.StepWrite:
        if not delayed.is_set() and any(isinstance(p, turn_store.Billed)
                                        for p in kwargs["parts"]):
            delayed.set()
            await asyncio.sleep(1.0)  # the statement has not gone out when the cut lands
        return await real(*args, **kwargs)

    monkeypatch.setattr(turn_store, "write_step", slow_to_send)
    provider = ScriptedProvider([ScriptStep(tool_calls=[("ping", {})]), ScriptStep(text="done")])
    ping = Tool("ping", "Answers pong.", {"type": "object", "properties": {}}, _ping)
    async with make_ator(providers={"s": provider}, tools=[ping]) as ator:
        scope, thread = await _submit_one(ator, "s", {"turn_timeout": 0.5})
        end = await wait_for_event(ator, scope, thread.id, ended, timeout=20)
        turn = await ator.turn(scope, end.turn_id)
        calls = await ator.db.read(sa.select(model_calls.c.cost_usd)
                                   .where(model_calls.c.turn_id == end.turn_id))
        spent, reserved = await _spend(ator, scope)
        kinds = [e.kind for e in await ator.events(scope, thread.id)]
    assert delayed.is_set() and end.data["stop_reason"] == "timeout"
    assert len(calls) == 1 and calls[0][0] > 0  # the first call, billed
    assert turn.cost_usd == calls[0][0] == spent and reserved == 0
    assert kinds[-3:] == ["assistant", "tool_results", "turn_ended"]
