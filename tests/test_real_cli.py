"""The real agent CLIs as runtimes, pointed at ator's wire-level model fakes (opt-in:
ATOR_TEST_REAL_CLI=1; `.ci/run` opts in).

The binaries come from PyPI wheels: `claude` bundled in `claude-agent-sdk`
(`claude_agent_sdk/_bundled/claude`) and `codex` in `openai-codex-cli-bin`
(`codex_cli_bin/bin/codex`), installed by `make real-cli` into `.venv/real-cli` (or named by
ATOR_TEST_CLAUDE_BIN / ATOR_TEST_CODEX_BIN). claude reaches the Anthropic fake through
ANTHROPIC_BASE_URL in the operator's CLI variables; codex reads no base URL from its
environment, so the operator's `codex_config` names a model provider on the Responses fake
(codex speaks only the Responses API now).

What these check that the recorded-stream tests cannot: that the argv ator builds is accepted
by the real binaries (the vanilla overlay, `--setting-sources=`, `--resume=`, codex's
`exec --json … -` and `resume`), that their real output parses into a turn, and that the cost
is the CLI's own (claude) or the catalog's price of codex's reported tokens.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ator import Ator, Scope
from ator.store import model_calls as call_store
from ator.testing import AnthropicWireFake, RecordedRequest, Reply, WireUsage
from ator.testing.responses_wire import ResponsesWireFake
from tests.conftest import ended, wait_for_event

ROOT = Path(__file__).resolve().parents[1] / ".venv" / "real-cli"


def _binary(variable: str, relative: str) -> Path:
    path = Path(os.environ.get(variable) or ROOT / relative)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not an executable: run `make real-cli` (or set {variable})")
    return path


def _texts(request: RecordedRequest) -> str:
    return repr(request.body)


@asynccontextmanager
async def _ator(make_ator: Any, tmp_path: Path, **settings: Any) -> AsyncIterator[Ator]:
    async with make_ator(cli_after_result=5.0, **settings) as ator:
        yield ator


async def _thread(ator: Ator, provider: str, model: str) -> tuple[Scope, Any]:
    org = await ator.create_org(f"org-{os.urandom(3).hex()}")
    scope = Scope(org.id)
    setup = await ator.create_setup(scope, name="real", provider=provider, model=model)
    return scope, await ator.create_thread(scope, setup.id)


async def _turn(ator: Ator, scope: Scope, thread: Any, text: str, after: int = 0) -> Any:
    await ator.submit(scope, thread.id, text)
    return await wait_for_event(ator, scope, thread.id, ended, after_seq=after, timeout=120)


async def _reply(ator: Ator, scope: Scope, thread: Any) -> str:
    events = [e for e in await ator.events(scope, thread.id) if e.kind == "assistant"]
    return "".join(b.get("text", "") for b in events[-1].data["content"]
                   if b["type"] == "text")


async def test_the_real_claude_cli_runs_a_turn_costs_what_it_reports_and_resumes(
    make_ator: Any, tmp_path: Path
) -> None:
    claude = _binary("ATOR_TEST_CLAUDE_BIN", "claude_agent_sdk/_bundled/claude")
    usage = WireUsage(input_tokens=1000, output_tokens=200)
    replies = iter(["First answer from the fake.", "Second answer, resumed."])
    fake = AnthropicWireFake(responder=lambda r: Reply(text=next(replies), usage=usage))
    async with fake:
        home = tmp_path / "cli-home"
        home.mkdir()
        cli_env = {"ANTHROPIC_BASE_URL": fake.origin, "ANTHROPIC_API_KEY": "sk-cli-test",
                   "HOME": str(home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                   "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1"}
        async with _ator(make_ator, tmp_path, claude_cli_path=claude, cli_env=cli_env) as ator:
            scope, thread = await _thread(ator, "claude_cli", "claude-sonnet-4-5")
            end = await _turn(ator, scope, thread, "Say the first thing.")
            assert end.data["status"] == "done", end.data
            assert await _reply(ator, scope, thread) == "First answer from the fake."
            # The prompt ator built reached the model through the real CLI.
            assert "Say the first thing." in _texts(fake.requests[0])
            calls = (await call_store.turn_calls(ator.db, scope, end.turn_id)).calls
            assert [c.cost_source for c in calls] == ["provider"]
            assert (calls[0].input_tokens, calls[0].output_tokens) == (1000, 200)
            # The CLI's own figure (its price table: $3/M in, $15/M out for this model).
            assert Decimal(end.data["cost_usd"]) == Decimal("0.006")

            # The next turn resumes the CLI's session: the model sees the first exchange.
            end2 = await _turn(ator, scope, thread, "And the second?", after=end.seq)
            assert end2.data["status"] == "done", end2.data
            assert await _reply(ator, scope, thread) == "Second answer, resumed."
            seen = _texts(fake.requests[-1])
            assert "First answer from the fake." in seen and "And the second?" in seen


async def test_the_real_codex_cli_runs_a_turn_priced_from_the_catalog_and_resumes(
    make_ator: Any, tmp_path: Path
) -> None:
    codex = _binary("ATOR_TEST_CODEX_BIN", "codex_cli_bin/bin/codex")
    usage = WireUsage(input_tokens=2000, output_tokens=100, cache_read_tokens=500)
    replies = iter(["Codex says one.", "Codex says two."])
    fake = ResponsesWireFake(responder=lambda r: Reply(text=next(replies), usage=usage))
    async with fake:
        config = ('model_provider = "fake"\n[model_providers.fake]\nname = "fake"\n'
                  f'base_url = "{fake.base_url}"\nwire_api = "responses"\n'
                  'env_key = "OPENAI_API_KEY"\n')
        async with _ator(make_ator, tmp_path, codex_cli_path=codex, codex_config=config,
                         cli_env={"OPENAI_API_KEY": "sk-cli-test"}) as ator:
            scope, thread = await _thread(ator, "codex_cli", "gpt-5-codex")
            end = await _turn(ator, scope, thread, "Say one.")
            assert end.data["status"] == "done", end.data
            assert await _reply(ator, scope, thread) == "Codex says one."
            assert "Say one." in _texts(fake.requests[0])
            price = ator.prices.lookup("gpt-5-codex")
            assert price is not None
            expected = ((2000 * price.input + 500 * price.cache_read + 100 * price.output)
                        / Decimal(1_000_000)).quantize(Decimal("0.000001"))
            assert Decimal(end.data["cost_usd"]) == expected
            assert end.data["cost_source"] == "catalog"  # computed by ator, and said so

            end2 = await _turn(ator, scope, thread, "Say two.", after=end.seq)
            assert end2.data["status"] == "done", end2.data
            assert await _reply(ator, scope, thread) == "Codex says two."
            seen = _texts(fake.requests[-1])
            assert "Codex says one." in seen and "Say two." in seen  # resumed
            # Per call, not the session's running total.
            assert Decimal(end2.data["cost_usd"]) == expected
