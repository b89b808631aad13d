"""Agent steps through the engine and the wire-level Anthropic fake: structured output with one
repair, usage and cost stored with the step, subagent tools denied, a retried attempt
following the same turn, and the run's usd budget ending it `budget` before a call."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from ator.engine.runtime import Ator
from ator.store.scope import Scope
from ator.testing import AnthropicWireFake, Keepalives, Reply, WireUsage
from ator.workflows import Workflows
from tests.workflow_util import org, published, recipe, settled, steps_of

MODEL = "claude-haiku-4-5"


@pytest.fixture
async def runtime(make_ator: Any) -> AsyncIterator[Ator]:
    async with make_ator(job_poll_interval=0.05, egress_allow="127.0.0.1") as ator:
        await ator.start_jobs()
        yield ator


async def _setup(ator: Ator, scope: Scope, fake: AnthropicWireFake) -> str:
    await ator.put_secret(scope, "anthropic", "sk-ant-test")
    setup = await ator.create_setup(
        scope, name=f"s-{uuid.uuid4().hex[:4]}", provider="anthropic", model=MODEL,
        config={"api_key": "secret:anthropic", "base_url": fake.base_url,
                "caps": {"max_output_tokens": 1000}})
    return str(setup.id)


def _tools(body: dict[str, Any] | None) -> set[str]:
    return {t["name"] for t in (body or {}).get("tools", [])}


async def test_an_agent_step_repairs_its_output_once_and_records_what_it_spent(
    runtime: Ator,
) -> None:
    script = [Reply(text="Sure! Here it is: ok", usage=WireUsage(100, 20)),
              Reply(text='```json\n{"verdict": "pass", "score": 9}\n```',
                    usage=WireUsage(150, 30))]
    async with AnthropicWireFake(script) as fake:
        scope = await org(runtime)
        setup_id = await _setup(runtime, scope, fake)
        wf = await published(runtime, scope, recipe(
            {"id": "judge", "type": "agent", "setup_id": setup_id,
             "prompt": "'Judge this: ' & input.doc",
             "output_schema": {"type": "object", "required": ["verdict", "score"],
                               "properties": {"verdict": {"enum": ["pass", "fail"]},
                                              "score": {"type": "integer"}}}}))
        run, _ = await runtime.service(Workflows).start(scope, wf, {"doc": "a haiku"})
        done = await settled(runtime, scope, run["id"])
        assert done["status"] == "succeeded", done["error"]
        assert done["output"] == {"verdict": "pass", "score": 9}
        assert len(fake.requests) == 2
        first, second = (r.body for r in fake.requests)
        assert "Judge this: a haiku" in str(first["messages"]) and "JSON Schema" in str(first)
        assert "does not match the schema" in str(second["messages"][-1])
        # Subagent tools are denied inside an agent step.
        assert not _tools(first) & {"agent_spawn", "agent_status", "agent_abort"}
        step = (await steps_of(runtime, scope, run["id"]))["judge"]
        assert step["usage"]["input_tokens"] == 250 and step["usage"]["output_tokens"] == 50
        assert step["cost_usd"] > 0
        assert done["spent_usd"] == step["cost_usd"]


async def test_a_schema_missed_twice_fails_the_step_at_once(runtime: Ator) -> None:
    async with AnthropicWireFake([Reply(text="no"), Reply(text="still no")]) as fake:
        scope = await org(runtime)
        setup_id = await _setup(runtime, scope, fake)
        wf = await published(runtime, scope, recipe(
            {"id": "a", "type": "agent", "setup_id": setup_id, "prompt": "'x'",
             "output_schema": {"type": "integer"}, "on_error": "fail"}))
        run, _ = await runtime.service(Workflows).start(scope, wf, {})
        done = await settled(runtime, scope, run["id"])
        assert (done["status"], done["fail_reason"]) == ("failed", "step_failed")
        assert "failed its schema twice" in done["error"]
        assert len(fake.requests) == 2  # not retried: the failure is the output's own


async def test_a_run_whose_usd_budget_one_more_call_would_exceed_ends_budget_first(
    runtime: Ator,
) -> None:
    # Each reply costs 1000 in + 1500 out tokens ($0.0085 at haiku-4.5 prices); a call's
    # worst case is about $0.005 (its input plus 1,000 output tokens), so $0.01 admits the
    # first call and refuses the second before it is made.
    script = [Reply(text="one", usage=WireUsage(1000, 1500)),
              Reply(text="two", usage=WireUsage(1000, 1500))]
    async with AnthropicWireFake(script) as fake:
        scope = await org(runtime)
        setup_id = await _setup(runtime, scope, fake)
        wf = await published(runtime, scope, recipe(
            {"id": "a", "type": "agent", "setup_id": setup_id, "prompt": "'first'"},
            {"id": "b", "type": "agent", "setup_id": setup_id, "prompt": "'second'"},
            budget={"usd": 0.01}))
        run, _ = await runtime.service(Workflows).start(scope, wf, {})
        done = await settled(runtime, scope, run["id"])
        assert (done["status"], done["fail_reason"]) == ("failed", "budget"), done
        assert "workflow run's budget" in done["error"]
        assert len(fake.requests) == 1  # the second call was never made
        assert Decimal(done["spent_usd"]) == Decimal("0.0085")
        assert Decimal(done["spent_usd"]) <= Decimal("0.01")


async def test_a_usd_budget_above_the_operator_ceiling_is_refused_at_its_pointer(
    runtime: Ator,
) -> None:
    from ator.errors import ValidationFailed
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    made = await flows.create(scope, "rich")
    with pytest.raises(ValidationFailed) as caught:
        await flows.publish(scope, made["id"], recipe(
            {"id": "a", "type": "transform", "expr": "1"}, budget={"usd": 10_000}))
    assert [e["pointer"] for e in caught.value.errors] == ["/budget/usd"]
    # No recipe budget: the operator's default applies, so no run is unbounded.
    wf = await published(runtime, scope, recipe({"id": "a", "type": "transform", "expr": "1"}))
    run, _ = await flows.start(scope, wf, {})
    assert run["usd_budget"] == Decimal(str(runtime.settings.workflow_usd))


async def test_concurrent_agent_steps_of_a_map_hold_the_runs_budget_between_them(
    runtime: Ator,
) -> None:
    # Four agent steps of a map start together; each call's worst case is about $0.005
    # (1,000 output tokens at haiku-4.5 prices) and each reply takes 0.5 s. Checked against
    # settled spend alone, all four saw $0 spent and went ahead ($0.02 in flight on a
    # $0.012 budget); holding each call's worst case admits two and refuses the others.
    script = [Keepalives(reply=Reply(text=f'"r{n}"', usage=WireUsage(100, 100)),
                         every=0.05, duration=0.5) for n in range(4)]
    async with AnthropicWireFake(script) as fake:
        scope = await org(runtime)
        setup_id = await _setup(runtime, scope, fake)
        done = await settled(runtime, scope, (await runtime.service(Workflows).start(
            scope, await published(runtime, scope, recipe(
                {"id": "m", "type": "map", "over": "[1..4]", "concurrency": 4,
                 "step": {"type": "agent", "setup_id": setup_id, "prompt": "'go ' & item"}},
                budget={"usd": 0.012})), {}))[0]["id"])
        assert (done["status"], done["fail_reason"]) == ("failed", "budget"), done
        assert len(fake.requests) == 2, len(fake.requests)
        items = [s for p, s in (await steps_of(runtime, scope, done["id"])).items()
                 if p.startswith("m/")]
        refused = [s for s in items if "workflow run's budget" in (s["error"] or "")]
        assert len(items) == 4 and len(refused) == 2, [s["error"] for s in items]
        assert Decimal(done["spent_usd"]) <= Decimal("0.012")
