"""Money is measured, not guessed: price-table arithmetic, cache writes, unknown models."""

from __future__ import annotations

from decimal import Decimal

import sqlalchemy as sa

from ator.cost.prices import Price, PriceTable
from ator.providers.base import Usage
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.store.schema import model_calls, org_usage
from tests.conftest import new_thread


def test_price_table_arithmetic_includes_cache_reads_and_writes() -> None:
    table = PriceTable({"m": Price.of("3", "15", "0.30", "3.75")})
    usage = Usage(input_tokens=1200, output_tokens=350, cache_read_tokens=40_000,
                  cache_write_tokens=9_000)
    priced = table.cost("m", usage)
    expected = (1200 * Decimal("3") + 350 * Decimal("15") + 40_000 * Decimal("0.30")
                + 9_000 * Decimal("3.75")) / Decimal(1_000_000)
    assert priced.priced and priced.usd == expected.quantize(Decimal("0.000001"))


def test_dated_model_ids_find_their_family_but_unknown_models_are_unpriced() -> None:
    table = PriceTable()
    assert table.lookup("claude-sonnet-4-5-20250929") == table.lookup("claude-sonnet-4-5")
    assert table.lookup("claude-opus-4-5-20251101") != table.lookup("claude-opus-4")
    unknown = table.cost("llama-70b", Usage(1000, 1000))
    assert (unknown.usd, unknown.priced) == (Decimal(0), False)


async def test_a_call_with_cache_writes_costs_the_price_table_arithmetic(make_ator) -> None:
    usage = Usage(input_tokens=2_000, output_tokens=500, cache_read_tokens=10_000,
                  cache_write_tokens=30_000)
    provider = ScriptedProvider([ScriptStep(text="cached", usage=usage)])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s", model="claude-sonnet-4-5-20250929")
        result = await ator.ask(scope, thread.id, "hi", timeout=30)
        expected = ator.prices.cost("claude-sonnet-4-5", usage).usd
        # $3 in, $15 out, $0.30 cache read, $3.75 cache write per MTok.
        assert expected == Decimal("0.006") + Decimal("0.0075") + Decimal("0.003") + Decimal(
            "0.1125")
        assert result.cost_usd == expected
        [row] = await ator.db.read(sa.select(model_calls).where(
            model_calls.c.turn_id == result.turn_id))
        [usage_row] = await ator.db.read(sa.select(org_usage.c.cost_usd).where(
            org_usage.c.org_id == scope.org_id))
        month = usage_row.cost_usd
        assert row.cache_write_tokens == 30_000 and row.cache_read_tokens == 10_000
        assert row.cost_usd == expected and row.priced
        assert month == expected
        turn = await ator.turn(scope, result.turn_id)
        assert turn.cost_usd == expected and turn.cache_write_tokens == 30_000


async def test_a_provider_that_reports_no_usage_records_zero_and_says_so(make_ator) -> None:
    step = ScriptStep(text="?", usage=Usage(reported=False))
    async with make_ator(providers={"s": ScriptedProvider([step])}) as ator:
        scope, thread = await new_thread(ator, "s", model="gpt-4o")
        result = await ator.ask(scope, thread.id, "hi", timeout=30)
        [row] = await ator.db.read(sa.select(model_calls).where(
            model_calls.c.turn_id == result.turn_id))
        assert (row.usage_reported, row.input_tokens, row.cost_usd) == (False, 0, 0)
