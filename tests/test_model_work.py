"""Model work outside a turn on real PostgreSQL: it reserves its worst case by the ledger's
one rule before the call, settles in the statement that records the call (no thread, no
turn, its label as purpose), is refused at the org's limit with nothing spent, bills what a
failed call consumed, and an expired hold is given back by the reaper's sweep."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from ator import Ator
from ator.errors import ProviderError
from ator.jobs import BudgetRefused, ModelWork, WorkCall
from ator.providers.base import Usage
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.store import ledger
from ator.store import orgs as org_store
from ator.store.schema import model_calls, org_usage, work_reservations
from ator.store.scope import Scope

PRICED = {"priced-model": {"input": "1", "output": "2"}}  # USD per million tokens


async def _org(ator: Ator, **budget: Any) -> Scope:
    org = await org_store.create_org(ator.db, f"org-{uuid.uuid4().hex[:6]}", **budget)
    return Scope(org.id)


async def _month(ator: Ator, scope: Scope) -> tuple[Decimal, Decimal]:
    rows = await ator.db.read(
        sa.select(sa.func.coalesce(sa.func.sum(org_usage.c.cost_usd), 0),
                  sa.func.coalesce(sa.func.sum(org_usage.c.reserved_usd), 0))
        .where(org_usage.c.org_id == scope.org_id))
    return Decimal(rows[0][0]), Decimal(rows[0][1])


async def _calls(ator: Ator, scope: Scope) -> list[Any]:
    return list(await ator.db.read(sa.select(model_calls)
                                   .where(model_calls.c.org_id == scope.org_id)))


def _call(**kw: Any) -> WorkCall:
    base: dict[str, Any] = {"label": "analysis:test", "provider": "fake",
                            "model": "priced-model", "prompt": "hello", "max_tokens": 1000}
    base.update(kw)
    return WorkCall(**base)


async def test_a_call_is_reserved_billed_under_its_label_and_released(make_ator) -> None:
    fake = ScriptedProvider([ScriptStep(text="hi there",
                                        usage=Usage(input_tokens=1000, output_tokens=500))])
    async with make_ator(providers={"fake": fake}, prices=PRICED) as ator:
        scope = await _org(ator, monthly_budget_usd=Decimal("1.00"))
        result = await ator.service(ModelWork).call(scope, _call())
        assert result.text == "hi there"
        assert result.cost_usd == Decimal("0.002000")  # 1000 x $1/M + 500 x $2/M
        calls = await _calls(ator, scope)
        assert len(calls) == 1
        c = calls[0]
        assert (c.purpose, c.thread_id, c.turn_id, c.cost_usd) == (
            "analysis:test", None, None, Decimal("0.002000"))
        assert await _month(ator, scope) == (Decimal("0.002000"), Decimal(0))
        held = await ator.db.read(sa.select(work_reservations)
                                  .where(work_reservations.c.org_id == scope.org_id))
        assert held == []


async def test_the_limit_refuses_before_the_call_and_spends_nothing(make_ator) -> None:
    fake = ScriptedProvider([ScriptStep(text="never")])
    async with make_ator(providers={"fake": fake}, prices=PRICED) as ator:
        # Worst case of 1M output tokens at $2/M is $2: it cannot fit a $1 budget.
        scope = await _org(ator, monthly_budget_usd=Decimal("1.00"))
        with pytest.raises(BudgetRefused):
            await ator.service(ModelWork).call(scope, _call(max_tokens=1_000_000))
        assert await _calls(ator, scope) == []
        assert await _month(ator, scope) == (Decimal(0), Decimal(0))


async def test_a_failed_call_is_billed_with_what_it_consumed(make_ator) -> None:
    fake = ScriptedProvider([ScriptStep(text="", error=ProviderError(
        "upstream broke", kind="server_error", retryable=False))])
    async with make_ator(providers={"fake": fake}, prices=PRICED) as ator:
        scope = await _org(ator, monthly_budget_usd=Decimal("1.00"))
        with pytest.raises(ProviderError):
            await ator.service(ModelWork).call(scope, _call())
        # Nothing consumed: no call row, and the reservation is given back whole.
        assert await _month(ator, scope) == (Decimal(0), Decimal(0))


async def test_the_sweep_gives_back_an_expired_hold_once(make_ator) -> None:
    async with make_ator(prices=PRICED, engine=False) as ator:  # no reaper: we sweep
        scope = await _org(ator, monthly_budget_usd=Decimal("1.00"))
        work_id = uuid.uuid4()
        held = await ledger.reserve_work(ator.db, scope, work_id, Decimal("0.4"),
                                         label="analysis:x", ttl=0.0)
        assert held.held
        assert (await _month(ator, scope))[1] == Decimal("0.4")
        swept = await ledger.release_closed(ator.db)
        assert swept.work >= 1
        assert (await _month(ator, scope))[1] == Decimal(0)
        # A late settle bills the call but releases nothing more.
        await ledger.settle_work(ator.db, scope, work_id, label="analysis:x", call=None)
        assert await _month(ator, scope) == (Decimal(0), Decimal(0))


async def test_work_and_turns_share_one_limit(make_ator) -> None:
    async with make_ator(prices=PRICED) as ator:
        scope = await _org(ator, monthly_budget_usd=Decimal("1.00"))
        one = await ledger.reserve_work(ator.db, scope, uuid.uuid4(), Decimal("0.7"),
                                        label="a", ttl=60)
        two = await ledger.reserve_work(ator.db, scope, uuid.uuid4(), Decimal("0.4"),
                                        label="a", ttl=60)
        assert one.held and not two.held
        assert two.refusal(Decimal("0.4")).startswith("the org's monthly budget")
