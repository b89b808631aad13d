"""The budget ledger on real PostgreSQL: reservations are atomic across replicas, settle to
the real cost, and a closed turn's reservation comes back exactly once."""

from __future__ import annotations

import asyncio
import random
import uuid
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from ator import Ator
from ator.providers.base import Usage
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.store import ledger
from ator.store import orgs as org_store
from ator.store.schema import model_calls, org_usage, turns
from ator.store.scope import Scope
from tests.conftest import new_thread


async def _org(ator: Ator, **budget: Any) -> Scope:
    org = await org_store.create_org(ator.db, f"org-{uuid.uuid4().hex[:6]}", **budget)
    return Scope(org.id)


async def _turn(ator: Ator, scope: Scope, status: str = "running") -> uuid.UUID:
    turn_id = uuid.uuid4()
    await ator.db.write(turns.insert().values(
        id=turn_id, org_id=scope.org_id, thread_id=uuid.uuid4(), status=status,
        config_snapshot={}, config_hash="", owner="test"))
    return turn_id


async def _month(ator: Ator, scope: Scope) -> tuple[Decimal, Decimal]:
    rows = await ator.db.read(sa.select(org_usage.c.cost_usd, org_usage.c.reserved_usd)
                              .where(org_usage.c.org_id == scope.org_id))
    return (rows[0].cost_usd, rows[0].reserved_usd) if rows else (Decimal(0), Decimal(0))


async def _held_by_turns(ator: Ator, scope: Scope) -> Decimal:
    rows = await ator.db.read(sa.select(sa.func.coalesce(sa.func.sum(turns.c.reserved_usd), 0))
                              .where(turns.c.org_id == scope.org_id))
    return Decimal(rows[0][0])


async def _close(ator: Ator, turn_id: uuid.UUID) -> None:
    await ator.db.write(turns.update().where(turns.c.id == turn_id).values(status="error"))


async def test_forty_concurrent_turns_on_two_replicas_never_pass_a_nearly_spent_budget(
    make_ator,
) -> None:
    async with make_ator(db_pool_size=20) as one, make_ator(db_pool_size=20) as two:
        limit = Decimal("1.00")
        scope = await _org(one, budget_ceiling_usd=limit)
        await ledger.settle(one.db, scope, await _turn(one, scope),
                            cost_usd=Decimal("0.95"), released_usd=Decimal(0))
        worst = Decimal("0.004")  # each call's reservation; its real cost is at most this
        rng = random.Random(6)
        calls = 0
        refused = 0

        async def turn(replica: Ator) -> None:
            nonlocal calls, refused
            turn_id = await _turn(replica, scope)
            while True:  # a turn makes model calls until the ledger refuses one
                held = await ledger.reserve(replica.db, scope, turn_id, worst)
                if not held.held:
                    refused += 1
                    assert "cannot cover" in held.refusal(worst)
                    return
                calls += 1
                assert held.spent_usd + held.reserved_usd <= limit
                actual = (worst * Decimal(rng.uniform(0.3, 1.0))).quantize(Decimal("0.000001"))
                await asyncio.sleep(0)  # the call; other turns reserve meanwhile
                await ledger.settle(replica.db, scope, turn_id, cost_usd=actual,
                                    released_usd=worst)

        await asyncio.gather(*(turn(one if i % 2 else two) for i in range(40)))
        spent, reserved = await _month(one, scope)
        assert refused == 40 and calls >= 12  # $0.05 left admits at least 12 calls of $0.004
        assert spent <= limit and reserved == 0
        assert await _held_by_turns(one, scope) == 0


async def test_an_estimate_that_was_too_low_overshoots_by_that_one_error_only(make_ator) -> None:
    async with make_ator() as ator:
        scope = await _org(ator, budget_ceiling_usd=Decimal("1"))
        first, second = await _turn(ator, scope), await _turn(ator, scope)
        assert (await ledger.reserve(ator.db, scope, first, Decimal("0.60"))).held
        assert (await ledger.reserve(ator.db, scope, second, Decimal("0.40"))).held
        assert not (await ledger.reserve(ator.db, scope, second, Decimal("0.000001"))).held
        # The first call's input estimate was low by $0.05: the overshoot is that error.
        await ledger.settle(ator.db, scope, first, cost_usd=Decimal("0.65"),
                            released_usd=Decimal("0.60"))
        await ledger.settle(ator.db, scope, second, cost_usd=Decimal("0.40"),
                            released_usd=Decimal("0.40"))
        assert await _month(ator, scope) == (Decimal("1.05"), Decimal(0))
        assert not (await ledger.reserve(ator.db, scope, first, Decimal("0.000001"))).held


async def test_the_limit_is_the_lower_of_budget_and_ceiling(make_ator) -> None:
    async with make_ator() as ator:
        ceiling_only = await _org(ator, budget_ceiling_usd=Decimal("2"))
        both = await _org(ator, monthly_budget_usd=Decimal("1"), budget_ceiling_usd=Decimal("2"))
        neither = await _org(ator)
        for scope, limit in ((ceiling_only, Decimal("2")), (both, Decimal("1"))):
            turn_id = await _turn(ator, scope)
            refused = await ledger.reserve(ator.db, scope, turn_id, limit + Decimal("0.01"))
            assert not refused.held and refused.limit_usd == limit
            assert (await ledger.reserve(ator.db, scope, turn_id, limit)).held
        unlimited = await ledger.reserve(ator.db, neither, await _turn(ator, neither),
                                         Decimal("1000"))
        assert unlimited.held and unlimited.limit_usd is None


async def test_a_turn_that_is_not_running_cannot_reserve(make_ator) -> None:
    async with make_ator() as ator:
        scope = await _org(ator, budget_ceiling_usd=Decimal("1"))
        done = await _turn(ator, scope, status="done")
        other = await _org(ator, budget_ceiling_usd=Decimal("1"))
        mine = await _turn(ator, scope)
        assert not (await ledger.reserve(ator.db, scope, done, Decimal("0.1"))).held
        # Another org's turn id is not this org's turn.
        assert not (await ledger.reserve(ator.db, other, mine, Decimal("0.1"))).held
        assert await _month(ator, scope) == (Decimal(0), Decimal(0))
        assert await _month(ator, other) == (Decimal(0), Decimal(0))


async def test_a_lost_turn_gives_its_reservation_back_once(make_ator) -> None:
    async with make_ator() as ator:
        scope = await _org(ator, budget_ceiling_usd=Decimal("1"))
        lost, alive = await _turn(ator, scope), await _turn(ator, scope)
        assert (await ledger.reserve(ator.db, scope, lost, Decimal("0.30"))).held
        assert (await ledger.reserve(ator.db, scope, alive, Decimal("0.20"))).held
        await _close(ator, lost)  # the reaper closed it: its owner died mid-call
        # This sweep or the test engine's own reaper (every 0.5 s, skipped rows are left to
        # the other) releases it: the figure to check is the month's, not which sweep did it.
        for _ in range(40):
            await ledger.release_closed(ator.db)
            if await _month(ator, scope) == (Decimal(0), Decimal("0.20")):
                break
            await asyncio.sleep(0.05)
        assert await _month(ator, scope) == (Decimal(0), Decimal("0.20"))
        # The dead owner's late step write records what was spent but releases nothing
        # again: the running turn's reservation stays held.
        await ledger.settle(ator.db, scope, lost, cost_usd=Decimal("0.25"),
                            released_usd=Decimal("0.30"))
        assert await _month(ator, scope) == (Decimal("0.25"), Decimal("0.20"))
        await ledger.release_closed(ator.db)
        assert await _month(ator, scope) == (Decimal("0.25"), Decimal("0.20"))
        assert await _held_by_turns(ator, scope) == Decimal("0.20")


async def test_an_orgs_concurrent_turns_bill_different_usage_rows_that_sum_to_its_spend(
    make_ator,
) -> None:
    """No hot row: turns of an org without a budget add their spend to shards picked by turn,
    and the shards sum to what the model calls cost. A budgeted org bills the budget row."""
    usage = Usage(input_tokens=1_000, output_tokens=100)
    steps = [ScriptStep(text="ok", usage=usage)] * 40
    async with make_ator(providers={"s": ScriptedProvider(steps)}) as ator:
        scope, first = await new_thread(ator, "s", model="claude-sonnet-4-5")
        threads = [await ator.create_thread(scope, first.setup_id) for _ in range(24)]
        await asyncio.gather(*(ator.ask(scope, t.id, "hi", timeout=60) for t in threads))
        rows = await ator.db.read(sa.select(org_usage.c.shard, org_usage.c.cost_usd)
                                  .where(org_usage.c.org_id == scope.org_id))
        calls = await ator.db.read(sa.select(sa.func.sum(model_calls.c.cost_usd))
                                   .where(model_calls.c.org_id == scope.org_id))
        assert len(rows) > 4, rows  # 24 turns over 64 shards
        assert all(1 <= r.shard <= 64 for r in rows)
        assert sum(r.cost_usd for r in rows) == calls[0][0] > 0

        budgeted, thread = await new_thread(ator, "s", model="claude-sonnet-4-5",
                                            budget=Decimal("10"))
        await ator.ask(budgeted, thread.id, "hi", timeout=60)
        rows = await ator.db.read(sa.select(org_usage.c.shard, org_usage.c.cost_usd,
                                            org_usage.c.reserved_usd)
                                  .where(org_usage.c.org_id == budgeted.org_id))
        assert [(r.shard, r.reserved_usd) for r in rows] == [(0, 0)] and rows[0].cost_usd > 0


async def test_turn_ends_spread_over_sixty_four_usage_rows(make_ator) -> None:
    """The shard a turn bills is uniform over 1-64 (the budget row, 0, is never picked): with
    20 pooled connections per process, 15 rows made concurrent turn ends of one org wait on
    each other's row locks (seen under bench/scale.py's burst as `Lock transactionid` waits).
    The shard is picked by the id's last byte: each of its 256 values once must give every
    shard exactly 4 ids."""
    async with make_ator() as ator:
        ids = [uuid.UUID(bytes=uuid.uuid4().bytes[:15] + bytes([b])) for b in range(256)]
        rows = await ator.db.fetch(sa.text(
            f"SELECT shard, count(*) AS n FROM (SELECT {ledger.TURN_SHARD.replace(':turn_id', 'u')}"
            " AS shard FROM unnest(CAST(:ids AS uuid[])) AS u) s GROUP BY shard"
        ), {"ids": ids}, write=False)
        assert {r["shard"]: r["n"] for r in rows} == {shard: 4 for shard in range(1, 65)}


async def test_a_reservation_counts_the_spend_billed_on_other_shards(make_ator) -> None:
    async with make_ator() as ator:
        scope = await _org(ator, budget_ceiling_usd=Decimal("1.00"))
        await ator.db.write(sa.insert(org_usage).values(
            org_id=scope.org_id, month=sa.func.date_trunc("month", sa.func.now()),
            shard=7, cost_usd=Decimal("0.90")))
        turn_id = await _turn(ator, scope)
        refused = await ledger.reserve(ator.db, scope, turn_id, Decimal("0.20"))
        assert not refused.held and refused.spent_usd == Decimal("0.90")
        held = await ledger.reserve(ator.db, scope, turn_id, Decimal("0.05"))
        assert held.held and held.spent_usd + held.reserved_usd == Decimal("0.95")
        # Settling returns the month's spend over every shard.
        month = await ledger.settle(ator.db, scope, turn_id, cost_usd=Decimal("0.04"),
                                    released_usd=Decimal("0.05"))
        assert month == Decimal("0.94")
