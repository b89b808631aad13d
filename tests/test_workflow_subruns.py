"""Sub-runs through the engine (real PostgreSQL, jobs in this process): a `workflow` step
runs a child of a published workflow and completes with its output; a failed child fails
the step with its reason; depth is capped; the child's spend (an agent step through the
wire-level Anthropic fake) rolls up to the parent once; pause, resume and cancel of the
parent reach the child."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from ator.engine.runtime import Ator
from ator.store.scope import Scope
from ator.testing import AnthropicWireFake, Reply, WireUsage
from ator.workflows import Workflows
from tests.workflow_util import org, published, recipe, settled, steps_of


@pytest.fixture
async def runtime(make_ator: Any) -> AsyncIterator[Ator]:
    async with make_ator(job_poll_interval=0.05, egress_allow="127.0.0.1",
                         workflow_max_depth=2) as ator:
        await ator.start_jobs()
        yield ator


def sub(workflow: uuid.UUID, **extra: Any) -> dict[str, Any]:
    return {"id": "sub", "type": "workflow", "workflow": str(workflow), **extra}


async def child_of(ator: Ator, scope: Scope, run_id: Any, timeout: float = 60.0) -> Any:
    """The run started by the parent's `sub` step (from the parent's events)."""
    flows, deadline = ator.service(Workflows), time.monotonic() + timeout
    while True:
        for e in await flows.events(scope, run_id, after=0, limit=1000):
            if e["kind"] == "subrun_started":
                return uuid.UUID(e["data"]["run_id"])
        assert time.monotonic() < deadline, "no sub-run started"
        await asyncio.sleep(0.05)


async def waiting_child(ator: Ator) -> tuple[Scope, Any, uuid.UUID]:
    """A parent run whose sub-run is running, waiting an hour: (its org, the parent, the
    child's id)."""
    scope = await org(ator)
    flows = ator.service(Workflows)
    child = await published(ator, scope, recipe({"id": "w", "type": "wait", "seconds": 3600}))
    parent = await published(ator, scope, recipe(sub(child)))
    run, _ = await flows.start(scope, parent, {})
    kid_id = await child_of(ator, scope, run["id"])
    await settled(ator, scope, kid_id, until={"running"})
    return scope, run, kid_id


async def test_the_step_completes_with_the_childs_output(runtime: Ator) -> None:
    scope = await org(runtime)
    child = await published(runtime, scope, recipe(
        {"id": "double", "type": "transform", "expr": "input.n * 2"},
        input={"type": "object", "required": ["n"]}))
    parent = await published(runtime, scope, recipe(
        sub(child, input="{'n': input.n + 1}"),
        {"id": "after", "type": "transform", "expr": "steps.sub + 100"}))
    run, _ = await runtime.service(Workflows).start(scope, parent, {"n": 4})
    done = await settled(runtime, scope, run["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["output"] == 110
    kid = await settled(runtime, scope, await child_of(runtime, scope, run["id"]))
    assert kid["status"] == "succeeded" and kid["output"] == 10
    assert (await steps_of(runtime, scope, run["id"]))["sub"]["output"] == 10


async def test_a_failed_child_fails_the_step_and_depth_is_capped(runtime: Ator) -> None:
    scope = await org(runtime)
    broken = await published(runtime, scope, recipe(
        {"id": "boom", "type": "transform", "expr": "$error('no good')"}, on_error="fail"))
    parent = await published(runtime, scope, recipe(sub(broken), on_error="fail"))
    run, _ = await runtime.service(Workflows).start(scope, parent, {})
    done = await settled(runtime, scope, run["id"])
    assert done["status"] == "failed" and "no good" in (done["error"] or ""), done
    # depth: a workflow starting itself stops at workflow_max_depth (2 here)
    flows = runtime.service(Workflows)
    made = await flows.create(scope, "self")
    loop_id = uuid.UUID(str(made["id"]))
    await flows.publish(scope, loop_id, recipe(sub(loop_id), on_error="fail"))
    top, _ = await flows.start(scope, loop_id, {})
    ended = await settled(runtime, scope, top["id"])
    assert ended["status"] == "failed" and "limit is 2" in (ended["error"] or ""), ended


async def test_the_childs_spend_rolls_up_once(runtime: Ator) -> None:
    async with AnthropicWireFake([Reply(text="hi", usage=WireUsage(1000, 100))]) as fake:
        scope = await org(runtime)
        await runtime.put_secret(scope, "anthropic", "sk-ant-test")
        setup = await runtime.create_setup(
            scope, name=f"s-{uuid.uuid4().hex[:4]}", provider="anthropic",
            model="claude-haiku-4-5",
            config={"api_key": "secret:anthropic", "base_url": fake.base_url,
                    "caps": {"max_output_tokens": 1000}})
        child = await published(runtime, scope, recipe(
            {"id": "a", "type": "agent", "setup_id": str(setup.id), "prompt": "'hello'"}))
        parent = await published(runtime, scope, recipe(
            sub(child), {"id": "t", "type": "transform", "expr": "1"}))
        run, _ = await runtime.service(Workflows).start(scope, parent, {})
        done = await settled(runtime, scope, run["id"])
        assert done["status"] == "succeeded", done["error"]
        kid = await settled(runtime, scope, await child_of(runtime, scope, run["id"]))
        spent = Decimal(kid["spent_usd"])
        assert spent > 0
        assert Decimal(done["spent_usd"]) == spent  # once, not twice
        step = (await steps_of(runtime, scope, run["id"]))["sub"]
        assert Decimal(step["cost_usd"]) == spent


async def test_pause_resume_and_cancel_reach_the_child(runtime: Ator) -> None:
    scope, run, kid_id = await waiting_child(runtime)
    flows = runtime.service(Workflows)
    await flows.pause(scope, run["id"])
    kid = await flows.run(scope, kid_id)
    assert kid["status"] == "paused" and kid["pause_reason"] == "parent"
    await flows.resume(scope, run["id"])
    assert (await flows.run(scope, kid_id))["status"] == "running"
    await flows.cancel(scope, run["id"])
    kid = await flows.run(scope, kid_id)
    assert kid["status"] == "cancelled" and kid["cancel_reason"] == "parent"
    assert (await flows.run(scope, run["id"]))["status"] == "cancelled"


async def test_a_parent_resumed_after_its_child_failed_starts_a_new_child(
    runtime: Ator,
) -> None:
    scope = await org(runtime)
    flows = runtime.service(Workflows)
    broken = await published(runtime, scope, recipe(
        {"id": "boom", "type": "transform", "expr": "$error('no good')"}, on_error="fail"))
    parent = await published(runtime, scope, recipe(sub(broken)))  # on_error: pause
    run, _ = await flows.start(scope, parent, {})
    paused = await settled(runtime, scope, run["id"], until={"paused"})
    assert "no good" in (paused["error"] or "")
    await flows.resume(scope, run["id"])
    deadline = time.monotonic() + 60
    while True:
        started = [e["data"]["run_id"] for e in await flows.events(scope, run["id"], after=0,
                                                                   limit=1000)
                   if e["kind"] == "subrun_started"]
        if len(started) == 2:
            break
        assert time.monotonic() < deadline, started
        await asyncio.sleep(0.05)
    assert started[0] != started[1]
    again = await settled(runtime, scope, run["id"], until={"paused"})
    assert "no good" in (again["error"] or "")
    second = await settled(runtime, scope, uuid.UUID(started[1]))
    assert second["status"] == "failed"


async def test_a_pause_of_the_tree_locks_the_child_before_the_parent(runtime: Ator) -> None:
    # A child's own tick locks the child, then its parent (its end wakes the parent, its
    # spend rolls up). A pause, resume or cancel of the parent changes both: it must take
    # them in the same order, or each side can hold the row the other waits for.
    scope, run, kid_id = await waiting_child(runtime)
    flows = runtime.service(Workflows)
    async with runtime.db.pool.acquire() as side:  # where the child's tick would be
        ticking = side.transaction()
        await ticking.start()
        await side.execute("SELECT 1 FROM workflow_runs WHERE id = $1 FOR NO KEY UPDATE", kid_id)
        pausing = asyncio.create_task(flows.pause(scope, run["id"]))

        async def waits() -> bool:
            return bool(await runtime.db.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()"))
        deadline = time.monotonic() + 10
        while not await waits():
            assert time.monotonic() < deadline, "the pause never waited for the child"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # as far as the pause can get
        # The child's tick can still take the parent: the pause has not locked it.
        assert await side.fetchval(
            "SELECT id FROM workflow_runs WHERE id = $1 FOR NO KEY UPDATE NOWAIT",
            run["id"]) == run["id"]
        await ticking.rollback()
    paused = await pausing
    assert paused["status"] == "paused"
    assert (await flows.run(scope, kid_id))["status"] == "paused"
