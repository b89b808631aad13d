"""Daily caps through whole turns: a setup's cap and the org's, in USD since midnight in the
org's time zone, end the next turn `budget` naming the cap; yesterday's spend does not count;
a bad zone or cap is refused with a code."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa

from ator import Scope
from ator.engine.daily_caps import DailyCaps, midnight
from ator.errors import ValidationFailed
from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from ator.store import turns as turn_store
from ator.store.schema import model_calls

MODEL = "claude-haiku-4-5"


class Honest:
    """Answers "ok" and reports 10 input and 10 output tokens (a priced, tiny call)."""

    name = "honest"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta("ok")
        yield MessageStop("end_turn", Usage(10, 10), request.model)


async def _why(ator, scope: Scope, result) -> str:
    return (await turn_store.get_turn(ator.db, scope, result.turn_id)).error or ""


async def _billed(ator, scope: Scope, setup_id, thread_id, turn_id, usd: str,
                  at: datetime) -> None:
    """A call billed at `at` (outside any turn of this test's clock)."""
    await ator.db.write(sa.insert(model_calls).values(
        org_id=scope.org_id, thread_id=thread_id, turn_id=turn_id, setup_id=setup_id, step=1,
        purpose="step", provider="h", model=MODEL, input_tokens=0, output_tokens=0,
        cache_read_tokens=0, cache_write_tokens=0, usage_reported=True, cost_usd=Decimal(usd),
        priced=True, duration_ms=1, request_meta={}, created_at=at))


async def test_a_setup_at_its_daily_cap_ends_budget_and_yesterday_does_not_count(
        make_ator) -> None:
    async with make_ator(providers={"h": Honest()}) as ator:
        scope = Scope((await ator.create_org("daily")).id)
        capped = await ator.create_setup(scope, name="capped", provider="h", model=MODEL,
                                         config={"daily_budget_usd": 0.5})
        free = await ator.create_setup(scope, name="free", provider="h", model=MODEL)
        thread = await ator.create_thread(scope, capped.id)
        other = await ator.create_thread(scope, free.id)
        first = await ator.ask(scope, thread.id, "hi", timeout=30)
        assert first.stop_reason == "end_turn"
        # Yesterday's $5 is not today's: the next turn runs.
        await _billed(ator, scope, capped.id, thread.id, first.turn_id, "5.00",
                      midnight("UTC") - timedelta(minutes=1))
        second = await ator.ask(scope, thread.id, "again", timeout=30)
        assert second.stop_reason == "end_turn"
        await _billed(ator, scope, capped.id, thread.id, first.turn_id, "0.50",
                      datetime.now(UTC))
        third = await ator.ask(scope, thread.id, "and again", timeout=30)
        assert third.status == "budget" and third.cost_usd == 0
        assert "setup's daily cap of $0.5" in await _why(ator, scope, third)
        # The cap is the setup's: another setup of the org still runs.
        assert (await ator.ask(scope, other.id, "hi", timeout=30)).stop_reason == "end_turn"


async def test_the_orgs_daily_cap_counts_every_setup_and_refuses_bad_settings(
        make_ator) -> None:
    async with make_ator(providers={"h": Honest()}) as ator:
        scope = Scope((await ator.create_org("daily-org")).id)
        caps = ator.service(DailyCaps)
        with pytest.raises(ValidationFailed) as zone:
            await caps.set_org(scope, Decimal("1"), "Mars/Olympus")
        assert zone.value.code == "invalid_time_zone"
        with pytest.raises(ValidationFailed) as bad:
            await caps.set_org(scope, Decimal("-1"), "UTC")
        assert bad.value.code == "invalid_cap"
        await caps.set_org(scope, Decimal("1.00"), "Europe/Berlin")
        a = await ator.create_setup(scope, name="a", provider="h", model=MODEL)
        b = await ator.create_setup(scope, name="b", provider="h", model=MODEL)
        ta, tb = await ator.create_thread(scope, a.id), await ator.create_thread(scope, b.id)
        done = await ator.ask(scope, ta.id, "hi", timeout=30)
        assert done.stop_reason == "end_turn"
        await _billed(ator, scope, a.id, ta.id, done.turn_id, "1.00", datetime.now(UTC))
        ended = await ator.ask(scope, tb.id, "hi", timeout=30)
        assert ended.status == "budget"
        why = await _why(ator, scope, ended)
        assert "org's daily cap of $1.00" in why and "Europe/Berlin" in why
