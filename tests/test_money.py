"""Money is measured, not guessed: prices from the maintained catalog plus operator
overrides, price-table arithmetic with cache reads/writes and tiers, unknown models, and the
worst case a call reserves."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa

from ator.cost import Tier, worst_case_usd
from ator.cost.prices import Price, PriceTable
from ator.providers.base import Usage
from ator.providers.scripted import ScriptedProvider, ScriptStep
from ator.settings import Settings
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


def test_no_model_borrows_another_models_price_by_prefix() -> None:
    """Regression: the old table priced claude-opus-4-6 as claude-opus-4 ($15/$75) and
    gpt-5-nano as gpt-5 ($1.25/$10) because each started with the other's id."""
    table = PriceTable()
    opus_4 = table.lookup("claude-opus-4")
    opus_4_6 = table.lookup("claude-opus-4-6")
    assert opus_4 is not None and (opus_4.input, opus_4.output) == (15, 75)
    # The catalog knows claude-opus-4-6 by name; its price is its own.
    assert opus_4_6 is not None and (opus_4_6.input, opus_4_6.output) == (5, 25)
    nano, gpt5 = table.lookup("gpt-5-nano"), table.lookup("gpt-5")
    assert gpt5 is not None and (gpt5.input, gpt5.output) == (Decimal("1.25"), 10)
    assert nano is not None and (nano.input, nano.output) == (Decimal("0.05"), Decimal("0.4"))
    # Names nobody prices stay unpriced, however much they look like a priced one.
    for model in ("claude-opus-4-60", "claude-opus-4-9", "gpt-5-pico", "gpt-5x",
                  "claude-sonnet-4-5x", "my-gpt-4o"):
        assert table.lookup(model) is None, model
        assert table.cost(model, Usage(1000, 1000)).priced is False
    # A dated snapshot or a platform suffix of a known model is that model.
    assert table.lookup("claude-opus-4-6-20260101") == opus_4_6
    assert table.lookup("claude-opus-4-6@20260101") == opus_4_6
    assert table.lookup("gpt-5-nano-2025-08-07") == nano
    sonnet_4 = table.lookup("claude-sonnet-4")
    assert sonnet_4 is not None and table.lookup("claude-sonnet-4-20250514") == sonnet_4
    assert table.lookup("claude-3-5-haiku-20241022") == table.lookup("claude-3-5-haiku")
    assert table.lookup("gemini-2.5-flash-lite-preview-06-17") is not None
    # Where the catalog's own prefix rule would lend a price across versions, it does not:
    # `claude-2.1` is not `claude-2`, `deepseek-r1t-chimera` is not `deepseek-r1`.
    for model in ("claude-2.1", "deepseek-r1t-chimera:free"):
        assert table.lookup(model) is None, model


def test_overrides_by_exact_id_win_and_never_spread_to_other_ids() -> None:
    table = PriceTable({"gpt-5": Price.of("2", "20", "1", "2"), "house-llm": Price.of(
        "0.1", "0.2", "0.1", "0.1")})
    assert table.lookup("gpt-5") == Price.of("2", "20", "1", "2")
    assert table.lookup("house-llm-2") is None
    assert table.lookup("gpt-5-mini") is not None and table.lookup("gpt-5-mini") != Price.of(
        "2", "20", "1", "2")
    assert PriceTable(catalog=False).lookup("gpt-5") is None
    assert PriceTable().with_overrides({"x": Price.of("1", "1", "1", "1")}).lookup("x")


def test_operator_prices_come_from_settings_inline_and_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"file-model": {"input": "1", "output": "2"},
                                "both": {"input": "9", "output": "9"}}))
    settings = Settings(prices_file=path, prices='{"both": {"input": "3", "output": "4", '
                        '"cache_read": "0.3"}}')
    table = PriceTable.from_settings(settings)
    # Cache kinds left out cost the input price: no discount nobody granted.
    assert table.lookup("file-model") == Price.of("1", "2", "1", "1")
    assert table.lookup("both") == Price.of("3", "4", "0.3", "3")
    with pytest.raises(ValueError, match="ATOR_PRICES_FILE"):
        Settings(prices_file=tmp_path / "missing.json")
    with pytest.raises(ValueError):
        Settings(prices={"m": {"input": "-1", "output": "1"}})
    with pytest.raises(ValueError):
        Settings(prices={"m": {"input": "NaN", "output": "1"}})


def test_tiered_prices_bill_every_token_at_the_tier_the_input_reaches() -> None:
    table = PriceTable()
    sonnet = table.lookup("claude-sonnet-4-5")
    assert sonnet is not None and sonnet.tiers and sonnet.tiers[0].above == 200_000
    short = table.cost("claude-sonnet-4-5", Usage(input_tokens=100_000, output_tokens=1_000))
    # 100k * $3 + 1k * $15 per MTok.
    assert short.usd == Decimal("0.315")
    # Over 200k input tokens (cache reads count), every token bills at $6 / $22.50 / $0.60.
    long = table.cost("claude-sonnet-4-5", Usage(input_tokens=50_000, output_tokens=1_000,
                                                 cache_read_tokens=160_000))
    assert long.usd == Decimal("0.3") + Decimal("0.0225") + Decimal("0.096")
    custom = PriceTable({"t": Price(Decimal(1), Decimal(2), Decimal(0), Decimal(0),
                                    (Tier(10, Price.of("10", "20", "0", "0")),))})
    assert custom.cost("t", Usage(10, 1)).usd == Decimal("0.000012")
    assert custom.cost("t", Usage(11, 1)).usd == Decimal("0.00013")


def test_worst_case_is_all_input_at_the_dearest_input_kind_plus_max_output() -> None:
    table = PriceTable({"m": Price.of("3", "15", "0.30", "3.75")})
    # 10k input as cache writes ($3.75) + 4096 output ($15), per MTok, rounded up.
    assert worst_case_usd(table, "m", 10_000, 4_096) == Decimal("0.09894")
    real = table.cost("m", Usage(input_tokens=2_000, output_tokens=4_096,
                                 cache_read_tokens=5_000, cache_write_tokens=3_000))
    assert real.usd <= worst_case_usd(table, "m", 10_000, 4_096)  # type: ignore[operator]
    assert worst_case_usd(table, "unknown-model", 10, 10) is None
    assert worst_case_usd(table, "m", 1, 0) == Decimal("0.000004")  # ceiling, not rounding
    sonnet = worst_case_usd(PriceTable(), "claude-sonnet-4-5", 250_000, 1_000)
    assert sonnet == Decimal("1.8975")  # the long-context tier: 250k * $7.50 + 1k * $22.50
    with pytest.raises(ValueError):
        worst_case_usd(table, "m", -1, 0)


async def test_pricing_never_blocks_the_event_loop() -> None:
    """The catalog is loaded at import; a lookup (hit or miss) is in-memory work only."""
    table = PriceTable()
    loop = asyncio.get_running_loop()
    started = loop.time()
    for i in range(300):
        table.cost(f"tenant-named-model-{i}", Usage(10, 10))
        table.cost("claude-sonnet-4-5-20250929", Usage(10, 10))
    assert loop.time() - started < 0.5


def test_the_lookup_cache_is_bounded() -> None:
    table = PriceTable()
    for i in range(5000):
        table.lookup(f"claude-sonnet-4-5-{20250000 + i}")
    assert len(table._cache) <= 4096
    assert table.lookup("claude-sonnet-4-5-20250001") == table.lookup("claude-sonnet-4-5")


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


async def test_a_turn_on_a_model_the_old_table_borrowed_for_is_billed_its_own_price(
    make_ator,
) -> None:
    usage = Usage(input_tokens=10_000, output_tokens=1_000)
    provider = ScriptedProvider([ScriptStep(text="a", usage=usage),
                                 ScriptStep(text="b", usage=usage)])
    async with make_ator(providers={"s": provider}) as ator:
        scope, thread = await new_thread(ator, "s", model="claude-opus-4-6")
        result = await ator.ask(scope, thread.id, "hi", timeout=30)
        # $5 in, $25 out per MTok; claude-opus-4's $15/$75 would be 0.225.
        assert result.cost_usd == Decimal("0.075")
        scope, thread = await new_thread(ator, "s", model="claude-opus-4-60")
        unknown = await ator.ask(scope, thread.id, "hi", timeout=30)
        [row] = await ator.db.read(sa.select(model_calls).where(
            model_calls.c.turn_id == unknown.turn_id))
        assert (row.cost_usd, row.priced, row.input_tokens) == (0, False, 10_000)
